// Chooses a sequence's next token from its logits on the host, with the sequence's own settings,
// and reports log probabilities. The engine chooses each row's token on the GPU by argmax; a
// server needs each request's own settings, so requests that sample (or ask for logprobs) take
// their row's logits and choose here.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>

#include "serve/sequence.h"

namespace doppler::serve {

class TokenSampler {
 public:
  // `seed` seeds the generator: the same seed and logits give the same tokens.
  TokenSampler(const SamplingSettings& settings, int top_logprobs, uint64_t seed);

  // The next token from `logits` (one row, [vocab]): the penalties, then greedy, or temperature,
  // top-k, top-p and min-p, then a draw. The log probabilities are those of the model's
  // distribution (log-softmax of the raw logits), as OpenAI reports them.
  GeneratedToken Choose(std::span<const float> logits);

 private:
  SamplingSettings settings_;
  int top_logprobs_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int64_t> counts_;  // generated tokens, for the penalties
};

}  // namespace doppler::serve
