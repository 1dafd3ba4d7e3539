#include "runtime/stop_matcher.h"

#include <algorithm>

namespace doppler::runtime {

std::string StopMatcher::Push(const std::string& text) {
  if (stopped_) return "";
  pending_ += text;
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) {
    if (!s.empty()) cut = std::min(cut, pending_.find(s));
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, cut);
    pending_.clear();
    return out;
  }
  // Keep the longest tail that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    for (size_t n = std::min(s.size() - (s.empty() ? 0 : 1), pending_.size()); n > keep; --n) {
      if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StopMatcher::Flush() {
  std::string out = stopped_ ? "" : pending_;
  pending_.clear();
  return out;
}

}  // namespace doppler::runtime
