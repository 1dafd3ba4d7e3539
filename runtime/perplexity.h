// Perplexity over a token stream, as llama.cpp's perplexity tool measures it: the stream is cut
// into windows of `window` tokens, each evaluated from an empty cache with its first token
// replaced by BOS (when the model has one); the second half of every window is scored (each token
// predicted from at least window/2 tokens of context).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>

#include "absl/status/statusor.h"
#include "runtime/engine.h"

namespace doppler::runtime {

struct PerplexityResult {
  double perplexity = 0.0;
  double stderr_perplexity = 0.0;  // standard error, from the spread of the per-token losses
  int64_t scored_tokens = 0;
  int64_t windows = 0;
};

// `progress(window_index, perplexity_so_far)` after each window.
absl::StatusOr<PerplexityResult> Perplexity(Engine& engine, std::span<const int32_t> tokens, int64_t window,
                                            std::optional<int32_t> bos,
                                            const std::function<void(int64_t, double)>& progress);

}  // namespace doppler::runtime
