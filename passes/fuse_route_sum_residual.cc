// fuse-route-sum-residual: the residual add after a mixture of experts joins its route sum, so
// that the sum is written once, by the kernel that sums the slots (the down product's own, where it
// computes the route sum: codegen/in_matmul.h).
//
//   before:  s = route_sum(y, w)   a = add(s, r) | add(r, s)      (r a [rows, N] value, a residual)
//   after:   a = route_sum(y, w, r)
//
// Applies when s feeds only the add, has no residual yet, and r does not depend on s. Runs before
// fuse-residual-rmsnorm, which would otherwise take the add into the next layer's norm: every
// workgroup of that norm's readers would then load the route sum and the residual to form x,
// where after this pass they load the one sum.
#include "passes/registry.h"
#include "passes/rewrite.h"

namespace doppler::passes {
namespace {

class FuseRouteSumResidual : public Pass {
 public:
  const char* name() const override { return "fuse-route-sum-residual"; }

  absl::StatusOr<bool> Run(Graph& g) const override {
    bool changed = false;
    UseLists uses(g);
    for (ValueId id = 0; id < g.size(); ++id) {
      const Node sum = g.node(id);  // a copy: its slot is emptied below
      if (sum.kind != OpKind::kRouteSum || sum.inputs.size() != 2) continue;
      const ValueId user = uses.SoleUser(g, id);
      if (user < 0 || g.node(user).kind != OpKind::kAdd) continue;
      const Node& add = g.node(user);
      const ValueId residual = add.inputs[0] == id ? add.inputs[1] : add.inputs[0];
      if (g.node(residual).type != sum.type || DependsOn(g, residual, id)) continue;
      NoteFused(g, id, {user});  // on the route sum, whose attrs the fused node takes
      Node& fused = g.mutable_node(user);
      fused.kind = OpKind::kRouteSum;
      fused.attrs = g.node(id).attrs;
      fused.label = sum.label;
      uses.SetInputs(g, user, {sum.inputs[0], sum.inputs[1], residual});
      uses.SetInputs(g, id, {});  // the route sum is dead
      changed = true;
    }
    if (changed) g = WithoutDeadNodes(g);
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeFuseRouteSumResidual() { return std::make_unique<FuseRouteSumResidual>(); }

}  // namespace doppler::passes
