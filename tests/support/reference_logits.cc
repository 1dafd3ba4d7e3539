#include "tests/support/reference_logits.h"

#include <algorithm>
#include <utility>

#include "tests/support/reference.h"

namespace doppler::test {

absl::StatusOr<ReferenceLogits> CompareWithReference(runtime::Engine& e, const std::vector<int32_t>& prompt,
                                                     const std::vector<int32_t>& tokens, const float* prefill_ref,
                                                     const float* decode_ref, int64_t prefill_rows) {
  const int64_t vocab = e.config().vocab_size;
  const int64_t rows = prefill_rows < 0 ? static_cast<int64_t>(prompt.size()) : prefill_rows;
  ReferenceLogits r;
  absl::StatusOr<std::vector<float>> prefill = e.PrefillLogits(prompt);
  if (!prefill.ok()) return prefill.status();
  r.prefill = *std::move(prefill);
  r.prefill_error = WorstRowError(r.prefill, prefill_ref, rows, vocab);
  for (size_t i = 0; i < tokens.size(); ++i) {
    absl::StatusOr<std::vector<float>> row = e.DecodeLogits(tokens[i]);
    if (!row.ok()) return row.status();
    r.decode_error = std::max(r.decode_error, WorstRowError(*row, decode_ref + i * vocab, 1, vocab));
    r.decode_top.push_back(ArgmaxRow(row->data(), vocab));
    r.decode.insert(r.decode.end(), row->begin(), row->end());
  }
  return r;
}

std::vector<int32_t> FollowingTokens(const std::vector<int32_t>& greedy, int32_t next_after_greedy) {
  std::vector<int32_t> next(greedy.begin() + (greedy.empty() ? 0 : 1), greedy.end());
  next.push_back(next_after_greedy);
  return next;
}

}  // namespace doppler::test
