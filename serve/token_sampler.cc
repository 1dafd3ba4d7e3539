#include "serve/token_sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace doppler::serve {

TokenSampler::TokenSampler(const SamplingSettings& settings, int top_logprobs, uint64_t seed)
    : settings_(settings), top_logprobs_(top_logprobs), rng_(seed) {}

GeneratedToken TokenSampler::Choose(std::span<const float> logits) {
  const size_t vocab = logits.size();
  // Log-softmax of the raw logits, in double.
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max_logit);
  const double log_norm = max_logit + std::log(sum);
  auto logprob = [&](int32_t id) { return static_cast<float>(logits[static_cast<size_t>(id)] - log_norm); };

  std::vector<double> adjusted(logits.begin(), logits.end());
  for (const auto& [id, count] : counts_) {
    adjusted[static_cast<size_t>(id)] -= settings_.presence_penalty + settings_.frequency_penalty * static_cast<double>(count);
  }
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  // Most likely first; ties to the lower id, as the GPU's argmax breaks them.
  auto more_likely = [&](int32_t a, int32_t b) {
    return adjusted[static_cast<size_t>(a)] > adjusted[static_cast<size_t>(b)] ||
           (adjusted[static_cast<size_t>(a)] == adjusted[static_cast<size_t>(b)] && a < b);
  };
  int32_t chosen;
  if (settings_.greedy()) {
    chosen = *std::min_element(order.begin(), order.end(), more_likely);
  } else {
    size_t keep = vocab;
    if (settings_.top_k > 0) keep = std::min(keep, static_cast<size_t>(settings_.top_k));
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(), more_likely);
    order.resize(keep);
    std::vector<double> p(keep);
    const double top = adjusted[static_cast<size_t>(order[0])] / settings_.temperature;
    double total = 0;
    for (size_t i = 0; i < keep; ++i) {
      p[i] = std::exp(adjusted[static_cast<size_t>(order[i])] / settings_.temperature - top);
      total += p[i];
    }
    // top-p: the smallest head holding top_p of the probability; min-p: at least min_p times the best.
    double mass = 0;
    size_t n = 0;
    while (n < keep) {
      if (p[n] < settings_.min_p * p[0]) break;
      mass += p[n] / total;
      ++n;
      if (mass >= settings_.top_p) break;
    }
    n = std::max<size_t>(n, 1);
    std::discrete_distribution<size_t> draw(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(n));
    chosen = order[draw(rng_)];
  }
  ++counts_[chosen];

  GeneratedToken out;
  out.id = chosen;
  out.logprob = logprob(chosen);
  if (top_logprobs_ > 0) {
    std::vector<int32_t> best(vocab);
    std::iota(best.begin(), best.end(), 0);
    const size_t k = std::min(vocab, static_cast<size_t>(top_logprobs_));
    std::partial_sort(best.begin(), best.begin() + static_cast<std::ptrdiff_t>(k), best.end(), [&](int32_t a, int32_t b) {
      return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
             (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
    });
    for (size_t i = 0; i < k; ++i) out.top.push_back({best[i], logprob(best[i])});
  }
  return out;
}

}  // namespace doppler::serve
