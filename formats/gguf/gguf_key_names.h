// A GGUF file's hyperparameters under their GGUF keys: the config is read from the metadata into
// config.json's terms (ConfigFromGguf), and errors about it are told back in the file's own.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace doppler::formats {

// "hidden_size" -> "llama.embedding_length" for architecture "llama"; a key with no GGUF
// counterpart is returned as it is.
std::string GgufKeyOfHfKey(const std::string& hf_key, const std::string& arch);

// doppler's own key after "{arch}.", which llama.cpp does not read: a bool, false where the
// config's YaRN keeps the ramp's ends unrounded (transformers' truncate false, GPT-OSS). llama.cpp
// rounds them whatever the file says; it is written only when false.
inline constexpr char kYarnTruncateKey[] = "rope.scaling.yarn_truncate";

// `status` with every config.json key it quotes ('hidden_size') replaced by the GGUF key.
absl::Status InGgufTerms(const absl::Status& status, const std::string& arch);

}  // namespace doppler::formats
