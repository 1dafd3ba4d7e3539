// fuse-norm-matmul: an RMSNorm whose readers are all matmuls becomes their prologue, so the
// normalised row is never written: each matmul sums x² over the x values it loads anyway and
// scales its results by 1/rms.
//
//   before:  n = rms_norm(x, g) {eps, weight_offset}   y = matmul(n, w, extras...) {E}
//   after:   y = matmul(x, w, g, extras...) {E, norm_eps = eps, norm_offset = weight_offset}
//
// Applies to whole-row norms without a residual (fuse-residual-rmsnorm's fused form writes the
// sum, which the matmul could not) when every reader takes the norm as its x. Run after fuse-qkv
// and fuse-gate-up, which merge plain matmuls only.
#include "passes/registry.h"
#include "passes/rewrite.h"

namespace doppler::passes {
namespace {

bool Fusable(const Graph& g, const UseLists& uses, const Node& norm) {
  if (norm.kind != OpKind::kRmsNorm || norm.attrs.Has("group") || norm.attrs.Has("split") ||
      norm.attrs.Int("residual") != 0 || IsOutput(g, norm.id)) {
    return false;
  }
  const std::vector<ValueId>& users = uses.users(norm.id);
  if (users.empty()) return false;
  for (ValueId u : users) {
    const Node& m = g.node(u);
    if (m.kind != OpKind::kMatMul || m.attrs.Has("norm_eps") || m.inputs[0] != norm.id) return false;
    for (size_t i = 1; i < m.inputs.size(); ++i) {
      if (m.inputs[i] == norm.id) return false;
    }
  }
  return true;
}

class FuseNormMatmul : public Pass {
 public:
  const char* name() const override { return "fuse-norm-matmul"; }

  absl::StatusOr<bool> Run(Graph& g) const override {
    bool changed = false;
    UseLists uses(g);
    const int original = g.size();
    for (ValueId id = 0; id < original; ++id) {
      const Node norm = g.node(id);
      if (!Fusable(g, uses, norm)) continue;
      // A copy: rebuilding a matmul moves it off the list.
      for (ValueId u : std::vector<ValueId>(uses.users(id))) {
        const Node m = g.node(u);
        std::vector<ValueId> inputs = {norm.inputs[0], m.inputs[1], norm.inputs[1]};
        inputs.insert(inputs.end(), m.inputs.begin() + 2, m.inputs.end());
        graph::Attrs attrs = m.attrs;
        SetNormPrologue(attrs, norm);
        if (absl::Status s = RebuildAs(g, uses, u, inputs, attrs, {id}); !s.ok()) return s;
      }
      changed = true;
    }
    if (changed) g = WithoutDeadNodes(g);
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeFuseNormMatmul() { return std::make_unique<FuseNormMatmul>(); }

}  // namespace doppler::passes
