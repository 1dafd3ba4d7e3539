// A matmul's or an expert_matmul's inputs by role, and the attrs that decide them.
//
//   matmul:         (x[T, K], w[N, K][, x_norm[K]], extra...)
//   expert_matmul:  (x, w[E*N, K], ids i32[T, k], extra...)
//
// x_norm is there with attr norm_eps (a norm prologue, fuse-norm-matmul): x is RMS-normalised
// with this weight first (attrs norm_eps, norm_offset). The extra inputs are the epilogue's (attr
// epilogue, graph/epilogue.h), one for each bias or add step in the order of the chain; an expert
// product's bias step takes every expert's bias, a vector [E*W] (W the width at that step: expert
// e's bias is values e*W..).
#pragma once

#include <optional>
#include <vector>

#include "graph/epilogue.h"
#include "graph/graph.h"

namespace doppler::graph {

struct MatMulInputs {
  ValueId x = -1, w = -1;
  std::optional<ValueId> x_norm;                 // matmul with norm_eps
  std::optional<ValueId> ids;                    // expert_matmul
  std::vector<ValueId> extras;                   // the epilogue's
  // The attrs.
  std::vector<EpilogueStep> epilogue;            // attr epilogue (empty: none)
  bool split = false;                            // attr split: the value is stored as parts (graph/layout.h)
  int64_t experts = 0;                           // expert_matmul: attr experts
};

// For a matmul or expert_matmul node that type inference accepted.
MatMulInputs MatMulInputsOf(const Node& matmul);
// The inputs in the order above (a pass changes the roles, then rebuilds the list); the attrs
// norm_eps and epilogue must say which are present.
std::vector<ValueId> MatMulInputList(const MatMulInputs& m);
// x · wᵀ alone: no norm prologue, epilogue or split.
bool IsPlainProduct(const MatMulInputs& m);

}  // namespace doppler::graph
