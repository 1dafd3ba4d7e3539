#include "runtime/perplexity.h"

#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace doppler::runtime {

absl::StatusOr<PerplexityResult> Perplexity(Engine& engine, std::span<const int32_t> tokens, int64_t window,
                                            std::optional<int32_t> bos,
                                            const std::function<void(int64_t, double)>& progress) {
  if (window < 4) return absl::InvalidArgumentError("the perplexity window must be at least 4 tokens");
  if (window > engine.context()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the perplexity window (", window, ") exceeds the context size ", engine.context()));
  }
  const int64_t windows = static_cast<int64_t>(tokens.size()) / window;
  if (windows == 0) {
    return absl::InvalidArgumentError(absl::StrCat("the text has ", tokens.size(), " tokens, fewer than one window of ",
                                                   window, " (use a smaller -c, --ctx-size)"));
  }
  const int64_t vocab = engine.config().vocab_size;
  const int64_t first_scored = window / 2;
  double sum = 0.0, sum_sq = 0.0;
  int64_t count = 0;
  PerplexityResult r;
  for (int64_t w = 0; w < windows; ++w) {
    std::vector<int32_t> ids(tokens.begin() + w * window, tokens.begin() + (w + 1) * window);
    if (bos) ids[0] = *bos;
    engine.Reset();
    absl::StatusOr<std::vector<float>> logits = engine.PrefillLogits(ids);
    if (!logits.ok()) return logits.status();
    for (int64_t j = first_scored; j + 1 < window; ++j) {
      const float* row = &(*logits)[static_cast<size_t>(j * vocab)];
      double max = row[0];
      for (int64_t v = 1; v < vocab; ++v) max = std::max(max, static_cast<double>(row[v]));
      double z = 0.0;
      for (int64_t v = 0; v < vocab; ++v) z += std::exp(row[v] - max);
      const double nll = std::log(z) + max - row[ids[static_cast<size_t>(j + 1)]];
      sum += nll;
      sum_sq += nll * nll;
      ++count;
    }
    if (progress) progress(w, std::exp(sum / static_cast<double>(count)));
  }
  const double mean = sum / static_cast<double>(count);
  const double var = std::max(0.0, sum_sq / static_cast<double>(count) - mean * mean);
  r.perplexity = std::exp(mean);
  r.stderr_perplexity = r.perplexity * std::sqrt(var / static_cast<double>(count));
  r.scored_tokens = count;
  r.windows = windows;
  return r;
}

}  // namespace doppler::runtime
