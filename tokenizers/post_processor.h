// What tokenizer.json's "post_processor" adds around one sequence when encoding with
// add_special_tokens=True (TemplateProcessing's "single" template, e.g. "<s> $A"). ByteLevel
// post-processors add nothing; Sequence combines its parts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace doppler::tokenizers {

struct SpecialTokenTemplate {
  std::vector<int32_t> prefix;  // ids before the text
  std::vector<int32_t> suffix;  // ids after it
};

absl::StatusOr<SpecialTokenTemplate> ParsePostProcessor(const nlohmann::json& spec, const std::string& where);

}  // namespace doppler::tokenizers
