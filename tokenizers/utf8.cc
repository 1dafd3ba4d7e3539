#include "tokenizers/utf8.h"

namespace doppler::tokenizers {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// Length of the sequence a lead byte starts, or 0 if it cannot start one.
size_t SequenceLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Whether `byte` may follow `lead` as its first continuation byte. The narrowed ranges exclude
// overlong forms (E0, F0), surrogates (ED) and code points above U+10FFFF (F4).
bool IsValidSecondByte(unsigned char lead, unsigned char byte) {
  switch (lead) {
    case 0xE0:
      return byte >= 0xA0 && byte <= 0xBF;
    case 0xED:
      return byte >= 0x80 && byte <= 0x9F;
    case 0xF0:
      return byte >= 0x90 && byte <= 0xBF;
    case 0xF4:
      return byte >= 0x80 && byte <= 0x8F;
    default:
      return byte >= 0x80 && byte <= 0xBF;
  }
}

bool IsContinuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

}  // namespace

std::optional<char32_t> NextCodePoint(std::string_view text, size_t& pos) {
  if (pos >= text.size()) return std::nullopt;
  const auto lead = static_cast<unsigned char>(text[pos]);
  const size_t length = SequenceLength(lead);
  if (length == 0 || pos + length > text.size()) return std::nullopt;
  if (length == 1) {
    ++pos;
    return lead;
  }
  const auto second = static_cast<unsigned char>(text[pos + 1]);
  if (!IsValidSecondByte(lead, second)) return std::nullopt;
  char32_t cp = lead & (0x7F >> length);
  for (size_t i = 1; i < length; ++i) {
    const auto byte = static_cast<unsigned char>(text[pos + i]);
    if (!IsContinuation(byte)) return std::nullopt;
    cp = (cp << 6) | (byte & 0x3F);
  }
  pos += length;
  return cp;
}

bool IsValidUtf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (!NextCodePoint(text, pos)) return false;
  }
  return true;
}

void AppendUtf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool IsUnicodeWhitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

void Utf8Sanitizer::Feed(std::string_view bytes, std::string& out) {
  for (char c : bytes) FeedByte(static_cast<unsigned char>(c), out);
}

void Utf8Sanitizer::FeedByte(unsigned char byte, std::string& out) {
  if (!pending_.empty()) {
    const auto lead = static_cast<unsigned char>(pending_[0]);
    const bool fits = pending_.size() == 1 ? IsValidSecondByte(lead, byte) : IsContinuation(byte);
    if (fits) {
      pending_ += static_cast<char>(byte);
      if (pending_.size() == expected_) {
        out += pending_;
        pending_.clear();
      }
      return;
    }
    // The pending bytes are a maximal invalid subsequence; `byte` starts afresh.
    out += kReplacement;
    pending_.clear();
  }
  expected_ = SequenceLength(byte);
  if (expected_ == 1) {
    out += static_cast<char>(byte);
  } else if (expected_ == 0) {
    out += kReplacement;
  } else {
    pending_ += static_cast<char>(byte);
  }
}

void Utf8Sanitizer::Finish(std::string& out) {
  if (!pending_.empty()) out += kReplacement;
  pending_.clear();
}

}  // namespace doppler::tokenizers
