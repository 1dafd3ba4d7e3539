#include "tests/support/cli_runner.h"

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tests/support/fixtures.h"

namespace doppler::test {

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string DopplerBinary() {
  const char* env = std::getenv("DOPPLER_BINARY");
  return env != nullptr ? env : DOPPLER_BINARY_PATH;
}

CommandResult RunShell(const std::string& command) {
  static int counter = 0;
  const std::filesystem::path dir = MakeTempDir("cmd" + std::to_string(counter++));
  const std::string full =
      command + " >" + (dir / "out").string() + " 2>" + (dir / "err").string() + " </dev/null";
  const int status = std::system(full.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadFile(dir / "out"), ReadFile(dir / "err")};
}

CommandResult RunDoppler(const std::string& args) { return RunShell(DopplerBinary() + " " + args); }

}  // namespace doppler::test
