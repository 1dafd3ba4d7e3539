// The HF fixture references (../shared/fixtures/hf/NAME): ids, greedy tokens and logits, and the
// comparison the fixture README prescribes (max |a - b| <= tol * max |ref row|, per row).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/support/npy.h"

namespace doppler::test {

struct HfReference {
  std::filesystem::path dir;
  std::vector<int32_t> input_ids;
  std::vector<int32_t> greedy_tokens;  // 16 ids
  int32_t next_token_after_greedy = -1;
  NpyArray prefill_logits;  // [24, V]
  NpyArray decode_logits;   // [16, V]
};

absl::StatusOr<HfReference> LoadHfReference(const std::string& name);

// One prompt of a fixture's batch_reference.json: decoded greedily on its own by transformers,
// `logits` row j the logits after the prompt and greedy[:j].
struct BatchReferencePrompt {
  std::vector<int32_t> input_ids, greedy_tokens;
  NpyArray logits;  // [greedy_tokens.size(), V]
};
absl::StatusOr<std::vector<BatchReferencePrompt>> LoadBatchReference(const std::string& name);

// Per-row worst ratio max|a-b| / max|ref| over `rows` rows of width `cols`.
double WorstRowError(const std::vector<float>& actual, const float* ref, int64_t rows, int64_t cols);

// Index of the first maximum of a row.
int32_t ArgmaxRow(const float* row, int64_t cols);

}  // namespace doppler::test
