// The parts of transformers' tokenizer_config.json that inference needs.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace doppler::tokenizers {

struct TokenizerConfig {
  std::optional<std::string> bos_token;  // token contents
  std::optional<std::string> eos_token;
  std::optional<bool> add_bos_token;  // unset: the tokenizer.json post-processor decides
  std::optional<bool> add_eos_token;
  std::string chat_template;  // Jinja source; empty when there is none
};

// Reads DIR/tokenizer_config.json; a missing file gives an empty config. chat_template comes from
// the file's "chat_template" (a string, or a list of {name, template} where "default" is taken),
// else from DIR/chat_template.jinja, where newer transformers versions save it.
absl::StatusOr<TokenizerConfig> ReadTokenizerConfig(const std::filesystem::path& model_dir);

}  // namespace doppler::tokenizers
