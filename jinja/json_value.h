// Template variables from JSON: objects keep their key order (as Python's json.loads does).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "jinja/value.h"

namespace doppler::jinja {

// A JSON text as a value; nesting deeper than max_depth is an error.
absl::StatusOr<Value> ValueFromJson(const std::string& json, int max_depth = 256);

}  // namespace doppler::jinja
