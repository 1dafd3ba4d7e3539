// Reading a JSON file (config.json, safetensors indexes, tokenizer files) into nlohmann::json,
// with errors that name the file instead of exceptions.
#pragma once

#include <filesystem>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace doppler::formats {

// NotFound when the file cannot be opened; InvalidArgument, naming the file, when it is not JSON.
absl::StatusOr<nlohmann::json> ReadJsonFile(const std::filesystem::path& path);

}  // namespace doppler::formats
