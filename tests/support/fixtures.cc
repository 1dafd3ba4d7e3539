#include "tests/support/fixtures.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

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

namespace {

// The directories MakeTempDir made, removed as the test process exits, so that runs do not fill
// the temp dir; not by a child forked from it (a death test's), which shares the list.
class MadeDirs {
 public:
  void Add(const std::filesystem::path& dir) {
    std::lock_guard<std::mutex> lock(mu_);
    dirs_.push_back(dir);
  }
  ~MadeDirs() {
    if (::getpid() != owner_) return;
    std::error_code ec;
    for (const std::filesystem::path& dir : dirs_) std::filesystem::remove_all(dir, ec);
  }

 private:
  const pid_t owner_ = ::getpid();
  std::mutex mu_;
  std::vector<std::filesystem::path> dirs_;
};

MadeDirs& Made() {
  static MadeDirs dirs;
  return dirs;
}

}  // namespace

std::filesystem::path MakeTempDir(std::string_view tag) {
  // Tests of several engineers may run at once: the pid and a counter keep directories apart.
  static std::atomic<int> counter{0};
  std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                              ("doppler_" + std::string(tag) + "_" + std::to_string(::getpid()) + "_" +
                               std::to_string(counter++));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir, ec);
  Made().Add(dir);
  return dir;
}

}  // namespace doppler::test
