// cache_write's inputs by role.
//
//   (cache[C, W], x[T, W][, rope table[, x_norm[head_dim]]])
//
// With a rope prologue (the table; fuse-rope) x is rotated as it is written, with attrs heads,
// head_dim and style; with a head norm prologue after it (its weight; fuse-head-norm) each head
// of x is RMS-normalised first (attrs norm_eps, norm_offset). An appending attention stands for
// two cache writes (graph/attention_inputs.h: AppendedCacheWrites).
#pragma once

#include <optional>
#include <vector>

#include "graph/graph.h"

namespace doppler::graph {

struct CacheWriteInputs {
  ValueId cache = -1, x = -1;
  std::optional<ValueId> rope, x_norm;  // x_norm only with rope
};

CacheWriteInputs CacheWriteInputsOf(const Node& cache_write);
// The inputs in the order above (a head norm's weight needs the table before it).
std::vector<ValueId> CacheWriteInputList(const CacheWriteInputs& c);

}  // namespace doppler::graph
