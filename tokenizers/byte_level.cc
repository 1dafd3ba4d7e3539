#include "tokenizers/byte_level.h"

#include <array>
#include <cstdint>
#include <optional>

#include "tokenizers/utf8.h"

namespace doppler::tokenizers {
namespace {

// Bytes that are printable and not whitespace ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves;
// the other 68 take the code points 256, 257, ... in byte order.
struct ByteLevelTables {
  std::array<std::string, 256> byte_to_char;
  std::array<int16_t, 256 + 68> char_to_byte;  // indexed by code point; -1 where none

  ByteLevelTables() {
    char_to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = self ? static_cast<char32_t>(b) : next++;
      AppendUtf8(cp, byte_to_char[b]);
      char_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTables& Tables() {
  static const ByteLevelTables tables;
  return tables;
}

}  // namespace

void AppendByteLevel(std::string_view bytes, std::string& out) {
  const ByteLevelTables& t = Tables();
  for (char c : bytes) out += t.byte_to_char[static_cast<unsigned char>(c)];
}

bool AppendBytesFromByteLevel(std::string_view text, std::string& out) {
  const ByteLevelTables& t = Tables();
  std::string bytes;
  bytes.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const std::optional<char32_t> cp = NextCodePoint(text, pos);
    if (!cp || *cp >= t.char_to_byte.size() || t.char_to_byte[*cp] < 0) return false;
    bytes += static_cast<char>(t.char_to_byte[*cp]);
  }
  out += bytes;
  return true;
}

}  // namespace doppler::tokenizers
