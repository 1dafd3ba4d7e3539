#include "tokenizers/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace doppler::tokenizers {
namespace {

std::string Pcre2Message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

absl::StatusOr<Regex> Regex::Compile(std::string_view pattern) { return Build(pattern, PCRE2_UTF | PCRE2_UCP); }

// PCRE2 refuses UCP beside LITERAL; a literal has no classes for it to affect anyway.
absl::StatusOr<Regex> Regex::Literal(std::string_view text) { return Build(text, PCRE2_UTF | PCRE2_LITERAL); }

absl::StatusOr<Regex> Regex::Build(std::string_view pattern, uint32_t options) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error,
                                   &error_offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("regex /", std::string(pattern), "/ at offset ", error_offset, ": ", Pcre2Message(error)));
  }
  // JIT makes pre-tokenizing several times faster; where it is unavailable the interpreter runs.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  Regex regex;
  regex.code_.reset(code, pcre2_code_free);
  return regex;
}

absl::StatusOr<std::vector<std::pair<size_t, size_t>>> Regex::FindAll(std::string_view text) const {
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> match(
      pcre2_match_data_create_from_pattern(code_.get(), nullptr), pcre2_match_data_free);
  if (match == nullptr) return absl::ResourceExhaustedError("regex: out of memory for match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::vector<std::pair<size_t, size_t>> ranges;
  size_t start = 0;
  while (start < text.size()) {
    const int rc = pcre2_match(code_.get(), subject, text.size(), start, PCRE2_NO_UTF_CHECK, match.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) return absl::InvalidArgumentError(absl::StrCat("regex match failed: ", Pcre2Message(rc)));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      ranges.emplace_back(begin, end);
      start = end;
    } else {
      // An empty match yields nothing; step over one whole character to keep UTF-8 boundaries.
      start = begin + 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
    }
  }
  return ranges;
}

}  // namespace doppler::tokenizers
