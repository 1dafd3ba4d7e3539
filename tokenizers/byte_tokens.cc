#include "tokenizers/byte_tokens.h"

#include "absl/strings/str_format.h"

namespace doppler::tokenizers {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::string ByteTokenName(uint8_t byte) { return absl::StrFormat("<0x%02X>", byte); }

std::optional<uint8_t> ParseByteToken(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return std::nullopt;
  const int high = HexValue(token[3]), low = HexValue(token[4]);
  if (high < 0 || low < 0) return std::nullopt;
  return static_cast<uint8_t>(high * 16 + low);
}

}  // namespace doppler::tokenizers
