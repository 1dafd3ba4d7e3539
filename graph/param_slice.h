// Where a param's values lie when the checkpoint stores them inside a larger tensor: rows of a
// fused matrix (Phi-3's qkv_proj), or one expert's matrix or bias in a tensor stacking every
// expert's (GPT-OSS's gate_up_proj [E, in, 2·out], gate and up interleaved). The attrs of a param
// node (graph/op.h kParam):
//   source      the stored tensor; the param's `name` then only identifies it
//   source_rows the rows of the stored matrix (the values of a stored vector) the param's come from
//   row_offset, row_stride (default 1)
//               the param's row i is stored row row_offset + i * row_stride
//   source_experts, expert (optional)
//               the tensor stacks source_experts matrices (vectors) on a leading dimension; the
//               param is taken from expert `expert`'s
//   in_out = 1  (matrices only) each stored matrix is [cols, source_rows], its inputs first, as
//               transformers saves stacked expert weights: the param is read transposed
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "graph/graph.h"

namespace doppler::graph {

struct ParamSlice {
  std::string source;
  int64_t source_rows = 0;
  int64_t row_offset = 0, row_stride = 1;
  int64_t source_experts = 0, expert = 0;  // source_experts 0: not stacked
  bool in_out = false;
};

// The param's slice, if its attrs give one (a verified graph's).
std::optional<ParamSlice> ParamSliceOf(const Node& param);
void SetParamSlice(const ParamSlice& slice, Attrs& attrs);
// That the slice's attrs are typed and its rows lie inside the source, for a param of `type`
// (a matrix, or a vector when the slice is not in_out).
absl::Status CheckParamSlice(const Node& param);
// The stored tensor's shape a param of `param_shape` taken from `slice` implies.
std::vector<int64_t> StoredShape(const ParamSlice& slice, const std::vector<int64_t>& param_shape);

}  // namespace doppler::graph
