// The merge loop shared by every BPE flavour here: HF's ranked merges and llama2.c's scored
// vocabulary differ only in how a pair of adjacent symbols is looked up.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"

namespace doppler::tokenizers {

struct MergeStep {
  double priority;  // lower merges first (an HF merge rank; minus a llama2.c score)
  int32_t merged;   // the id of the joined symbol
};

using MergeLookup = absl::FunctionRef<std::optional<MergeStep>(int32_t left, int32_t right)>;

// Repeatedly joins the adjacent pair with the lowest priority, the leftmost one among equals,
// until no pair merges; `symbols` is replaced by the result. O(n log n) with a heap, so a long
// piece (a run of 100k letters) costs no more than its length.
void MergeSymbols(std::vector<int32_t>& symbols, MergeLookup lookup);

}  // namespace doppler::tokenizers
