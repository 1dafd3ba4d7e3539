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
#include <algorithm>

#include "graph/matmul_inputs.h"
#include "graph/rms_norm_inputs.h"
#include "passes/registry.h"
#include "passes/rewrite.h"

namespace doppler::passes {
namespace {

bool Fusable(const Graph& g, const UseLists& uses, const Node& norm) {
  if (norm.kind != OpKind::kRmsNorm) return false;
  const graph::RmsNormInputs r = graph::RmsNormInputsOf(norm);
  if (r.group || r.split || r.residual || IsOutput(g, norm.id)) return false;
  const std::vector<ValueId>& users = uses.users(norm.id);
  if (users.empty()) return false;
  for (ValueId u : users) {
    const Node& m = g.node(u);
    if (m.kind != OpKind::kMatMul) return false;
    const graph::MatMulInputs mm = graph::MatMulInputsOf(m);
    if (mm.x_norm || mm.x != norm.id || std::count(m.inputs.begin(), m.inputs.end(), norm.id) != 1) return false;
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
      const graph::RmsNormInputs r = graph::RmsNormInputsOf(norm);
      // A copy: rebuilding a matmul moves it off the list.
      for (ValueId u : std::vector<ValueId>(uses.users(id))) {
        const Node m = g.node(u);
        graph::MatMulInputs mm = graph::MatMulInputsOf(m);
        mm.x = r.x;
        mm.x_norm = r.w;
        const std::vector<ValueId> inputs = graph::MatMulInputList(mm);
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
