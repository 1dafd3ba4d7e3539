// SentencePiece's byte-fallback tokens "<0x41>": how a byte missing from the vocabulary is
// spelled (HF BPE with byte_fallback, llama2.c's tokenizer.bin).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace doppler::tokenizers {

// "<0xNN>" with uppercase hex digits, the spelling the vocabularies use.
std::string ByteTokenName(uint8_t byte);

// The byte a token stands for when it is exactly "<0x" + two hex digits + ">" (either case).
std::optional<uint8_t> ParseByteToken(std::string_view token);

}  // namespace doppler::tokenizers
