// GPT-2's reversible byte <-> character mapping. Byte-level BPE vocabularies (Llama 3, Qwen,
// GPT-2) spell every token in these 256 printable characters, e.g. 'Ġ' (U+0120) for a space.
#pragma once

#include <string>
#include <string_view>

namespace doppler::tokenizers {

// Appends the byte-level spelling of raw `bytes` (as UTF-8) to `out`.
void AppendByteLevel(std::string_view bytes, std::string& out);

// Appends the raw bytes that a byte-level spelling stands for. Returns false, having appended
// nothing, when `text` holds a character outside the 256 (or is not valid UTF-8).
bool AppendBytesFromByteLevel(std::string_view text, std::string& out);

}  // namespace doppler::tokenizers
