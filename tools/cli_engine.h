// Options shared by the commands that load a model, and turning them into EngineOptions.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "runtime/engine.h"
#include "tools/cli_args.h"

namespace doppler::cli {

// --model, --dtype, --ctx, --device, --verbose.
std::vector<OptionSpec> EngineOptionSpecs();
absl::StatusOr<runtime::EngineOptions> EngineOptionsFromArgs(const ParsedArgs& args);

}  // namespace doppler::cli
