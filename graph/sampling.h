// The meaning of the sampling ops, shared by the interpreter and documented for the GPU kernels
// (codegen/emit_sample.cc follows it step by step).
//
// sample(logits[1, V]) at a step whose last token is at position p:
//   1. temperature <= 0: the first maximum (greedy). Otherwise y = x / temperature, m = max y.
//   2. top_k (0 < k < V): keep y >= the k-th largest y (ties at the boundary are all kept).
//   3. w = exp(y - m) over the kept set, Z = sum w.
//   4. top_p (< 1): keep y >= the largest value v whose kept mass {y >= v} is at least top_p * Z.
//   5. min_p (> 0): keep w >= min_p (w of the most likely token is 1).
//   6. u = SampleUniform(seed, p); the token is the first index i (in index order) at which the
//      running sum of kept w exceeds u * (sum of kept w).
#pragma once

#include <cstdint>

namespace doppler::graph {

struct SampleParams {
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  double min_p = 0.0;
  uint32_t seed = 0;
};

// A uniform float in [0, 1) (24 random bits) from a counter-based hash of (seed, position): the same
// seed and position give the same number on every device, so generation is reproducible.
float SampleUniform(uint32_t seed, uint32_t position);

int32_t SampleToken(const float* logits, int64_t vocab, const SampleParams& params, uint32_t position);

// x > 0 ? x / penalty : x * penalty, the division done as a product with the float32 reciprocal:
// GPUs divide approximately, a product is exact everywhere.
inline float Penalize(float x, double penalty) {
  return x > 0.0f ? x * static_cast<float>(1.0 / penalty) : x * static_cast<float>(penalty);
}

}  // namespace doppler::graph
