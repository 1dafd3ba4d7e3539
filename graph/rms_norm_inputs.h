// rms_norm's inputs by role, and the attrs that decide them.
//
//   (x[T, D], w[G][, residual[T, D][, x_norm[D]]])
//
// The residual is there with attr residual = 1: the op normalises s = x + residual and returns
// [s | norm(s)]. x_norm, only with a residual and attr norm_eps (a norm prologue,
// fuse-residual-rmsnorm), is the weight x is first normalised by (attrs norm_eps, norm_offset).
#pragma once

#include <optional>
#include <vector>

#include "graph/graph.h"

namespace doppler::graph {

struct RmsNormInputs {
  ValueId x = -1, w = -1;
  std::optional<ValueId> residual;  // with residual = 1
  std::optional<ValueId> x_norm;    // with residual = 1 and norm_eps
  // The attrs.
  std::optional<int64_t> group;     // attr group: each G values alone (G = head_dim: a head norm); absent: whole rows
  bool split = false;               // attr split: the value is stored as parts (graph/layout.h)
};

RmsNormInputs RmsNormInputsOf(const Node& rms_norm);
// The inputs in the order above; the attrs residual and norm_eps must say which are present.
std::vector<ValueId> RmsNormInputList(const RmsNormInputs& r);

}  // namespace doppler::graph
