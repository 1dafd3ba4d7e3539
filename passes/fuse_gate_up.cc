// fuse-gate-up: the gated MLP's two projections become one matmul on the stacked weight.
//
//   before:  g = matmul(x, w_gate)   u = matmul(x, w_up)   y = mul(act(g), u)     (act: silu, gelu_tanh)
//   after:   y = matmul(x, concat_rows(w_gate, w_up)) {epilogue = act_mul}
//
// Applies when g and u read the same x, their weights are of one dtype and row length (rows of a
// block format concatenate like any rows), neither matmul has an epilogue yet, and g, act(g) and
// u feed nothing else. A checkpoint that stores gate_up_proj (Phi-3) declares its gate and up as
// row slices of that tensor, so the stacked weight is the stored tensor again.
#include "absl/strings/str_cat.h"
#include "passes/registry.h"
#include "passes/rewrite.h"

namespace doppler::passes {
namespace {

bool PlainMatMul(const Graph& g, ValueId id) {
  const Node& n = g.node(id);
  return n.kind == OpKind::kMatMul && n.inputs.size() == 2 && !n.attrs.Has("epilogue") && !n.attrs.Has("split") &&
         IsWeight(g, n.inputs[1]);
}

class FuseGateUp : public Pass {
 public:
  const char* name() const override { return "fuse-gate-up"; }

  absl::StatusOr<bool> Run(Graph& g) const override {
    bool changed = false;
    const int original = g.size();
    for (ValueId id = 0; id < original; ++id) {
      const Node mul = g.node(id);
      if (mul.kind != OpKind::kMul) continue;
      for (int side = 0; side < 2; ++side) {
        const ValueId act = mul.inputs[static_cast<size_t>(side)], up = mul.inputs[static_cast<size_t>(1 - side)];
        const OpKind act_kind = g.node(act).kind;
        if (act_kind != OpKind::kSilu && act_kind != OpKind::kGeluTanh) continue;
        const ValueId gate = g.node(act).inputs[0];
        if (!PlainMatMul(g, gate) || !PlainMatMul(g, up) || gate == up) continue;
        const Node& gn = g.node(gate);
        const Node& un = g.node(up);
        if (gn.inputs[0] != un.inputs[0] || SoleUser(g, gate) != act || SoleUser(g, act) != id ||
            SoleUser(g, up) != id) {
          continue;
        }
        const graph::TensorType& wg = g.node(gn.inputs[1]).type;
        const graph::TensorType& wu = g.node(un.inputs[1]).type;
        if (wg != wu) continue;  // the gated product needs [gate | up] of equal rows and one dtype
        const ValueId x = gn.inputs[0];
        absl::StatusOr<ValueId> w = ConcatWeights(g, {gn.inputs[1], un.inputs[1]}, absl::StrCat(gn.label, "+up"));
        if (!w.ok()) return w.status();
        const char* epilogue = act_kind == OpKind::kSilu ? "silu_mul" : "gelu_tanh_mul";
        absl::StatusOr<ValueId> fused =
            AddNode(g, OpKind::kMatMul, {x, *w}, graph::Attrs{{"epilogue", std::string(epilogue)}}, mul.label);
        if (!fused.ok()) return fused.status();
        NoteFused(g, *fused, {gate, up, act, id});
        g.ReplaceAllUses(id, *fused);
        changed = true;
        break;
      }
    }
    if (changed) g = WithoutDeadNodes(g);
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeFuseGateUp() { return std::make_unique<FuseGateUp>(); }

}  // namespace doppler::passes
