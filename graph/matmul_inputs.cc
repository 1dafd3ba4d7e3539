#include "graph/matmul_inputs.h"

namespace doppler::graph {

MatMulInputs MatMulInputsOf(const Node& n) {
  MatMulInputs m;
  auto at = [&](size_t i) { return i < n.inputs.size() ? n.inputs[i] : ValueId{-1}; };
  m.x = at(0);
  m.w = at(1);
  size_t next = 2;
  if (n.kind == OpKind::kExpertMatMul) {
    m.ids = at(next++);
    m.experts = n.attrs.Int("experts");
  } else if (n.attrs.Has("norm_eps")) {
    m.x_norm = at(next++);
  }
  for (size_t i = next; i < n.inputs.size(); ++i) m.extras.push_back(n.inputs[i]);
  absl::StatusOr<std::vector<EpilogueStep>> steps = ParseEpilogue(n.attrs.Str("epilogue"));
  if (steps.ok()) m.epilogue = *std::move(steps);
  m.split = n.attrs.Has("split");
  return m;
}

std::vector<ValueId> MatMulInputList(const MatMulInputs& m) {
  std::vector<ValueId> in = {m.x, m.w};
  for (const std::optional<ValueId>& v : {m.x_norm, m.ids}) {
    if (v) in.push_back(*v);
  }
  in.insert(in.end(), m.extras.begin(), m.extras.end());
  return in;
}

bool IsPlainProduct(const MatMulInputs& m) {
  return !m.x_norm && m.extras.empty() && m.epilogue.empty() && !m.split;
}

}  // namespace doppler::graph
