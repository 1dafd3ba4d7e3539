#include "graph/activation_quant.h"

#include <algorithm>
#include <cmath>

namespace doppler::graph {

void RoundThroughQ8(const float* x, int64_t n, float* out) {
  for (int64_t b = 0; b < n; b += kQ8Block) {
    float amax = 0.0f;
    for (int64_t i = b; i < b + kQ8Block; ++i) amax = std::max(amax, std::abs(x[i]));
    const float d = amax * kQ8InverseMax;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    for (int64_t i = b; i < b + kQ8Block; ++i) {
      const float scaled = x[i] * id;
      out[i] = d * std::nearbyint(scaled);  // the default rounding mode: to nearest, ties to even
    }
  }
}

}  // namespace doppler::graph
