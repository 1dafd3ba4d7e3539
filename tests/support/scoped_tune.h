// Sets DOPPLER_TUNE (codegen/tuning/tuning.h) for one scope and restores the environment after.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace doppler::test {

class ScopedTune {
 public:
  explicit ScopedTune(const char* value) {
    if (const char* old = std::getenv("DOPPLER_TUNE")) old_ = old;
    setenv("DOPPLER_TUNE", value, 1);
  }
  ~ScopedTune() {
    if (old_) {
      setenv("DOPPLER_TUNE", old_->c_str(), 1);
    } else {
      unsetenv("DOPPLER_TUNE");
    }
  }
  ScopedTune(const ScopedTune&) = delete;
  ScopedTune& operator=(const ScopedTune&) = delete;

 private:
  std::optional<std::string> old_;
};

}  // namespace doppler::test
