#include "graph/rms_norm_inputs.h"

namespace doppler::graph {

RmsNormInputs RmsNormInputsOf(const Node& n) {
  RmsNormInputs r;
  auto at = [&](size_t i) { return i < n.inputs.size() ? n.inputs[i] : ValueId{-1}; };
  r.x = at(0);
  r.w = at(1);
  if (n.attrs.Int("residual") != 0) {
    r.residual = at(2);
    if (n.attrs.Has("norm_eps")) r.x_norm = at(3);
  }
  if (n.attrs.Has("group")) r.group = n.attrs.Int("group");
  r.split = n.attrs.Has("split");
  return r;
}

std::vector<ValueId> RmsNormInputList(const RmsNormInputs& r) {
  std::vector<ValueId> in = {r.x, r.w};
  for (const std::optional<ValueId>& v : {r.residual, r.x_norm}) {
    if (v) in.push_back(*v);
  }
  return in;
}

}  // namespace doppler::graph
