// An engine run along a reference's path (prefill on the prompt, then one decode step per
// reference greedy token), compared row by row with the reference's logits: the check every
// end-to-end model test makes, whatever its reference (HF fixtures, dequantized GGUF logits).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/engine.h"

namespace doppler::test {

struct ReferenceLogits {
  double prefill_error = 0;         // WorstRowError over the compared prefill rows
  double decode_error = 0;          // the worst decode step's WorstRowError
  std::vector<float> prefill;       // the prompt's logits, [prompt, V]
  std::vector<float> decode;        // every decode step's logits, [steps, V]
  std::vector<int32_t> decode_top;  // each decode step's argmax
};

// Prefills `prompt` and compares its first `prefill_rows` rows with `prefill_ref` ([rows, V]); then
// decodes each of `tokens` and compares step i with row i of `decode_ref`. `prefill_rows` < 0: all.
absl::StatusOr<ReferenceLogits> CompareWithReference(runtime::Engine& e, const std::vector<int32_t>& prompt,
                                                     const std::vector<int32_t>& tokens, const float* prefill_ref,
                                                     const float* decode_ref, int64_t prefill_rows = -1);

// The token each decode step along `greedy` should choose: the next greedy token, and after the last
// one `next_after_greedy`.
std::vector<int32_t> FollowingTokens(const std::vector<int32_t>& greedy, int32_t next_after_greedy);

}  // namespace doppler::test
