// Reading the fields of tokenizer.json components with errors that say where ("FILE:
// pre_tokenizer.pretokenizers[0]: ..."), instead of nlohmann's exceptions.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tokenizers/regex.h"

namespace doppler::tokenizers {

absl::Status JsonError(const std::string& where, const std::string& what);

// obj[key] as a string; an error when obj is not an object or the field is missing or not a string.
absl::StatusOr<std::string> StringField(const nlohmann::json& obj, const char* key, const std::string& where);

// obj[key] as a bool; `fallback` when missing or null.
absl::StatusOr<bool> BoolField(const nlohmann::json& obj, const char* key, bool fallback, const std::string& where);

// obj[key] as a token id: an integer in [0, kMaxTokenId].
absl::StatusOr<int32_t> IdField(const nlohmann::json& obj, const char* key, const std::string& where);
// The same check for a value on its own (a vocabulary entry, an element of an id list).
absl::StatusOr<int32_t> IdValue(const nlohmann::json& value, const std::string& where);

// Ids are dense indices into tables sized by the largest one, so a corrupt id must not ask for
// gigabytes; real vocabularies stay far below this (Gemma 3: 262,144).
inline constexpr int32_t kMaxTokenId = (1 << 24) - 1;

// A component's "pattern": {"String": literal} or {"Regex": pattern}.
absl::StatusOr<Regex> PatternField(const nlohmann::json& obj, const std::string& where);

}  // namespace doppler::tokenizers
