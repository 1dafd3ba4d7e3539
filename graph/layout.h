// Values stored as separate column blocks (attr split = "w0,w1,..."): a fused matmul computing
// q, k and v, or a fused norm producing both the residual sum and the normalised value, writes
// each column group as its own contiguous [rows, w_i] block, so each `part` that reads one is an
// ordinary tensor at an offset of the same buffer. Only part nodes may read a split value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "graph/graph.h"

namespace doppler::graph {

// Part offsets are aligned to this many bytes, enough for any device's descriptor offset alignment.
constexpr size_t kPartAlignment = 256;

// The widths of a split value (empty when the node's value is not split).
std::vector<int64_t> SplitWidths(const Node& n);

struct PartRange {
  size_t offset;  // bytes from the start of the value's buffer
  size_t bytes;
};

// Where each part of a split value of `rows` rows lives; the last range ends the value.
std::vector<PartRange> SplitLayout(const std::vector<int64_t>& widths, int64_t rows, DType dtype);

// Bytes a value takes for `rows` rows of its first dimension as T (split values included).
size_t ValueBytes(const Node& n, int64_t tokens);

// The matmuls that read part 1 of a residual rms_norm (the normalised sum), each as its x and
// nothing else, with no norm prologue of its own, in node order (a layer's projections whose weight
// types differ: Q4_K_M's q and k beside a v of more bits); none where another node reads that part.
std::vector<ValueId> MatmulsOfNormedPart(const Graph& g, ValueId norm);

// The matmul that alone reads a last_row node, as its x and nothing else; none where the row is
// read by another node or after the step.
std::optional<ValueId> SoleMatmulOfLastRow(const Graph& g, ValueId last_row);

}  // namespace doppler::graph
