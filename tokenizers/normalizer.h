// tokenizer.json's "normalizer": the text rewriting applied before pre-tokenization. Supported:
// NFC (Qwen2/3), Prepend and Replace (SentencePiece-style Llama 2 / TinyLlama / Gemma, which
// spell spaces as '▁'), and Sequence of them.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tokenizers/regex.h"

namespace doppler::tokenizers {

class Normalizer {
 public:
  // `spec` may be null (no normalization). Unknown types are an error naming `where`.
  static absl::StatusOr<Normalizer> FromJson(const nlohmann::json& spec, const std::string& where);

  // `text` must be valid UTF-8.
  absl::StatusOr<std::string> Apply(std::string_view text) const;

 private:
  struct Step {
    enum class Kind { kNfc, kPrepend, kReplace } kind;
    std::string text;              // Prepend: what to put in front; Replace: the replacement
    std::optional<Regex> pattern;  // Replace: what to replace
  };
  absl::Status Add(const nlohmann::json& spec, const std::string& where);

  std::vector<Step> steps_;
};

}  // namespace doppler::tokenizers
