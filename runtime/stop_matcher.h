// Holds back generated text that could still turn into a stop string, so a stop string is never
// printed, not even in part.
#pragma once

#include <string>
#include <vector>

namespace doppler::runtime {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Adds generated text; returns the part that is safe to show. After a stop string appears,
  // returns the text before it and stopped() turns true.
  std::string Push(const std::string& text);
  // What was held back (generation ended without a stop string).
  std::string Flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace doppler::runtime
