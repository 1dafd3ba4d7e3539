#include "runtime/decode_activations.h"

#include "absl/strings/str_cat.h"
#include "codegen/tuning/experts.h"
#include "passes/pass.h"

namespace doppler::runtime {

absl::StatusOr<graph::Graph> WithDecodeActivations(graph::Graph g, DecodeActivations want,
                                                   const codegen::TargetCaps& caps, const std::string& device) {
  if (want == DecodeActivations::kF32 || (want == DecodeActivations::kAuto && !caps.integer_dot_product)) return g;
  if (!caps.integer_dot_product) {
    return absl::FailedPreconditionError(
        absl::StrCat("q8 decode activations need integer dot products, which ", device, " does not have (use f32)"));
  }
  absl::StatusOr<std::unique_ptr<passes::Pass>> pass = passes::MakePass("q8-activations");
  if (!pass.ok()) return pass.status();
  absl::StatusOr<bool> changed = (*pass)->Run(g);
  if (!changed.ok()) return changed.status();
  // Expert products whose x the device cannot stage as q8 keep exact x (codegen/tuning/experts.h).
  for (graph::ValueId id = 0; id < g.size(); ++id) {
    graph::Node& n = g.mutable_node(id);
    if (n.kind != graph::OpKind::kExpertMatMul || !n.attrs.Has("x_quant")) continue;
    absl::StatusOr<bool> q8 = codegen::tuning::ExpertsTakeQ8(caps, g.node(n.inputs[1]).type.dtype,
                                                             g.node(n.inputs[0]).type.shape[1].value);
    if (!q8.ok()) return q8.status();
    if (!*q8) n.attrs.Erase("x_quant");
  }
  return g;
}

}  // namespace doppler::runtime
