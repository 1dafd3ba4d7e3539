#include "graph/sampling.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

namespace doppler::graph {

float SampleUniform(uint32_t seed, uint32_t position) {
  // PCG-style output permutation of a mixed counter (all uint32 arithmetic, wrapping).
  uint32_t state = (seed ^ (position * 0x9E3779B9u)) * 747796405u + 2891336453u;
  uint32_t word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
  word = (word >> 22u) ^ word;
  return static_cast<float>(word >> 8) * (1.0f / 16777216.0f);
}

int32_t SampleToken(const float* x, int64_t vocab, const SampleParams& p, uint32_t position) {
  if (p.temperature <= 0.0) return static_cast<int32_t>(std::max_element(x, x + vocab) - x);
  const float inv_t = static_cast<float>(1.0 / p.temperature);
  std::vector<float> y(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) y[static_cast<size_t>(i)] = x[i] * inv_t;
  const float m = *std::max_element(y.begin(), y.end());

  float threshold = -INFINITY;
  if (p.top_k > 0 && p.top_k < vocab) {
    std::vector<float> sorted = y;
    std::nth_element(sorted.begin(), sorted.begin() + (p.top_k - 1), sorted.end(), std::greater<float>());
    threshold = sorted[static_cast<size_t>(p.top_k - 1)];
  }
  std::vector<float> w(y.size(), 0.0f);
  double z = 0.0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] >= threshold) z += (w[i] = std::exp(y[i] - m));
  }
  if (p.top_p < 1.0) {
    std::vector<size_t> order;
    for (size_t i = 0; i < y.size(); ++i) {
      if (y[i] >= threshold) order.push_back(i);
    }
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return y[a] > y[b]; });
    // The boundary value: mass of {y >= v} counts every token tied with v.
    double mass = 0.0;
    for (size_t k = 0; k < order.size(); ++k) {
      mass += w[order[k]];
      const bool last_of_ties = k + 1 == order.size() || y[order[k + 1]] != y[order[k]];
      if (last_of_ties && mass >= p.top_p * z) {
        threshold = y[order[k]];
        break;
      }
    }
  }
  double kept = 0.0;
  int64_t last = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] < threshold || w[i] < static_cast<float>(p.min_p)) w[i] = 0.0f;
    if (w[i] > 0.0f) {
      kept += w[i];
      last = static_cast<int64_t>(i);
    }
  }
  const double target = SampleUniform(p.seed, position) * kept;
  double running = 0.0;
  for (size_t i = 0; i < y.size(); ++i) {
    running += w[i];
    if (w[i] > 0.0f && running > target) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(last);
}

}  // namespace doppler::graph
