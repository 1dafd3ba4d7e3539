// The doppler subcommands. Each takes the arguments after its name and returns the exit code;
// errors are printed once, by main.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace doppler::cli {

absl::StatusOr<int> RunCommand(const std::vector<std::string>& args);
absl::StatusOr<int> LogitsCommand(const std::vector<std::string>& args);
absl::StatusOr<int> DevicesCommand(const std::vector<std::string>& args);
absl::StatusOr<int> PerplexityCommand(const std::vector<std::string>& args);
absl::StatusOr<int> GraphCommand(const std::vector<std::string>& args);
absl::StatusOr<int> ConvertCommand(const std::vector<std::string>& args);
absl::StatusOr<int> BenchCommand(const std::vector<std::string>& args);
absl::StatusOr<int> TemplateCommand(const std::vector<std::string>& args);
absl::StatusOr<int> ServeCommand(const std::vector<std::string>& args);

}  // namespace doppler::cli
