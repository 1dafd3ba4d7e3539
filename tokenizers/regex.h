// A PCRE2 pattern for the regex parts of tokenizer.json (Split pre-tokenizers, Replace
// normalizers). Regexes are compiled for UTF-8 with Unicode properties (UTF + UCP), so \p{L},
// \p{N}, \s and (?i) follow Unicode as the Oniguruma engine behind HF tokenizers does; lookahead
// such as Llama 3's \s+(?!\S) works. Thread-safe: matching state is per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

struct pcre2_real_code_8;  // PCRE2's compiled pattern (pcre2_code with 8-bit code units)

namespace doppler::tokenizers {

class Regex {
 public:
  // A regular expression; the error (a status message) says where the pattern is wrong.
  static absl::StatusOr<Regex> Compile(std::string_view pattern);
  // A literal string, matched as is.
  static absl::StatusOr<Regex> Literal(std::string_view text);

  // Byte ranges [begin, end) of all non-overlapping, non-empty matches, left to right.
  // `text` must be valid UTF-8.
  absl::StatusOr<std::vector<std::pair<size_t, size_t>>> FindAll(std::string_view text) const;

 private:
  static absl::StatusOr<Regex> Build(std::string_view pattern, uint32_t options);

  std::shared_ptr<pcre2_real_code_8> code_;
};

}  // namespace doppler::tokenizers
