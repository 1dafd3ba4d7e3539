// UTF-8 helpers shared by the tokenizers: strict code point decoding, and the lossy conversion
// that HF's byte-level decoder applies to decoded bytes, in a form that can run incrementally.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace doppler::tokenizers {

// Decodes the code point starting at text[pos] and moves pos past it. Returns nullopt and leaves
// pos alone for anything that is not a complete, shortest-form, non-surrogate sequence.
std::optional<char32_t> NextCodePoint(std::string_view text, size_t& pos);

bool IsValidUtf8(std::string_view text);

void AppendUtf8(char32_t cp, std::string& out);

// Unicode's White_Space property (what HF's added-token lstrip/rstrip skip over).
bool IsUnicodeWhitespace(char32_t cp);

// Turns a byte stream into valid UTF-8 exactly as Rust's String::from_utf8_lossy does on the whole
// stream: each maximal invalid subsequence becomes one U+FFFD. Bytes that may still be the start
// of a character are held back until the following bytes (or Finish) settle them, so the output
// never ends in half a character.
class Utf8Sanitizer {
 public:
  void Feed(std::string_view bytes, std::string& out);
  // Ends the stream: a held-back unfinished character becomes U+FFFD.
  void Finish(std::string& out);

 private:
  void FeedByte(unsigned char byte, std::string& out);

  std::string pending_;  // a proper prefix of a valid multi-byte sequence
  size_t expected_ = 0;  // total length of the sequence pending_ starts
};

}  // namespace doppler::tokenizers
