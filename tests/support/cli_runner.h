// Running the doppler binary (or any shell command) from a test, as a user would, capturing its
// exit code and output.
#pragma once

#include <filesystem>
#include <string>

namespace doppler::test {

struct CommandResult {
  int exit_code;  // -1 when the command did not exit normally
  std::string out, err;
};

std::string ReadFile(const std::filesystem::path& path);

// The binary under test: $DOPPLER_BINARY when set (a build carried to another machine), else the
// one the test binary was built with.
std::string DopplerBinary();

// Runs `command` through the shell with no standard input.
CommandResult RunShell(const std::string& command);
// Runs `doppler ARGS`.
CommandResult RunDoppler(const std::string& args);

}  // namespace doppler::test
