// Unicode Normalization Form C, for the "NFC" normalizer of tokenizer.json (Qwen2/3).
//
// Implemented here from the Unicode tables (unicode_nfc_data.cc, generated from Python's
// unicodedata) rather than through ICU: neither glibc nor PCRE2 offers normalization, and the
// algorithm (decompose, order marks, recompose) is short once the tables exist.
#pragma once

#include <string>
#include <string_view>

namespace doppler::tokenizers {

// `text` must be valid UTF-8. Text already in NFC (e.g. ASCII) is returned unchanged.
std::string NfcNormalize(std::string_view text);

}  // namespace doppler::tokenizers
