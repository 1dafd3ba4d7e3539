#include "tests/support/fixtures.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace doppler::test {

std::filesystem::path FixturesDir() {
  if (const char* env = std::getenv("DOPPLER_FIXTURES"); env != nullptr && *env != '\0') return env;
#ifdef DOPPLER_FIXTURES_DIR
  return DOPPLER_FIXTURES_DIR;
#else
  return "fixtures";
#endif
}

std::string ReadFileBytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "cannot read " << path << " (is DOPPLER_FIXTURES set to the fixtures directory?)";
    return "";
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json ReadJsonFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) {
    ADD_FAILURE() << "cannot read " << path << " (is DOPPLER_FIXTURES set to the fixtures directory?)";
    return nullptr;
  }
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    ADD_FAILURE() << path << " is not valid JSON";
    return nullptr;
  }
  return j;
}

std::filesystem::path MakeTempDir(std::string_view tag) {
  // Tests of several engineers may run at once: the pid and a counter keep directories apart.
  static std::atomic<int> counter{0};
  std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                              ("doppler_" + std::string(tag) + "_" + std::to_string(::getpid()) + "_" +
                               std::to_string(counter++));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir, ec);
  return dir;
}

}  // namespace doppler::test
