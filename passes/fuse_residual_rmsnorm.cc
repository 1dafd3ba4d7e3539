// fuse-residual-rmsnorm: a residual add feeding an RMSNorm becomes one op that writes both the
// sum (the next residual) and the normalised sum.
//
//   before:  s = add(x, r)   n = rms_norm(s, w)        (s may have other readers)
//   after:   f = rms_norm(x, w, r) {residual = 1, split = "D,D"}
//            s = part(f, 0)   n = part(f, 1)
//
// Applies when x and r have one [rows, D] shape (no broadcast) and the norm covers whole rows.
// When x (or r: the add is symmetric) is itself a row norm read only by the add, it becomes the
// op's prologue (attrs norm_eps, norm_offset; its weight is input 3): Gemma 3's post-norm, the
// residual add and the next pre-norm are then one op.
// Run after fuse-matmul-epilogue: a residual add right after a matmul is better in its epilogue
// (Llama's), so this catches the adds of values that are not matmul outputs (Gemma 3's
// post-norms feeding the next pre-norm).
#include "absl/strings/str_cat.h"
#include "graph/rms_norm_inputs.h"
#include "passes/registry.h"
#include "passes/rewrite.h"

namespace doppler::passes {
namespace {

// A whole-row norm without a residual.
bool PlainNorm(const Node& n) {
  if (n.kind != OpKind::kRmsNorm) return false;
  const graph::RmsNormInputs r = graph::RmsNormInputsOf(n);
  return !r.group && !r.residual;
}

class FuseResidualRmsNorm : public Pass {
 public:
  const char* name() const override { return "fuse-residual-rmsnorm"; }

  absl::StatusOr<bool> Run(Graph& g) const override {
    bool changed = false;
    UseLists uses(g);
    const int original = g.size();
    for (ValueId id = 0; id < original; ++id) {
      const Node norm = g.node(id);
      if (!PlainNorm(norm)) continue;
      const graph::RmsNormInputs rn = graph::RmsNormInputsOf(norm);
      const ValueId sum = rn.x;
      const Node add = g.node(sum);  // a copy: adding nodes below moves the graph's nodes
      if (add.kind != OpKind::kAdd || g.node(add.inputs[0]).type != g.node(add.inputs[1]).type) continue;
      // The sum's other readers take part 0; only one norm may absorb it.
      int norms = 0;
      for (ValueId u : uses.users(sum)) norms += g.node(u).kind == OpKind::kRmsNorm ? 1 : 0;
      if (norms != 1) continue;
      const int64_t d = norm.type.shape[1].value;
      graph::Attrs attrs = norm.attrs;
      attrs.Set("residual", int64_t{1});
      attrs.Set("split", absl::StrCat(d, ",", d));
      graph::RmsNormInputs fused_inputs{.x = add.inputs[0], .w = rn.w, .residual = add.inputs[1]};
      std::vector<ValueId> absorbed = {sum};
      for (int side = 0; side < 2; ++side) {
        const ValueId v = add.inputs[static_cast<size_t>(side)];
        const Node& pre = g.node(v);
        if (!PlainNorm(pre) || uses.SoleUser(g, v) != sum) continue;
        const graph::RmsNormInputs pn = graph::RmsNormInputsOf(pre);
        fused_inputs = {.x = pn.x, .w = rn.w, .residual = add.inputs[static_cast<size_t>(1 - side)], .x_norm = pn.w};
        SetNormPrologue(attrs, pre);
        absorbed.push_back(v);
        break;
      }
      absl::StatusOr<ValueId> fused =
          uses.AddNode(g, OpKind::kRmsNorm, graph::RmsNormInputList(fused_inputs), attrs, norm.label);
      if (!fused.ok()) return fused.status();
      NoteFused(g, *fused, absorbed);
      absl::StatusOr<ValueId> sum_part = uses.AddNode(g, OpKind::kPart, {*fused}, graph::Attrs{{"index", int64_t{0}}}, add.label);
      if (!sum_part.ok()) return sum_part.status();
      absl::StatusOr<ValueId> norm_part = uses.AddNode(g, OpKind::kPart, {*fused}, graph::Attrs{{"index", int64_t{1}}}, norm.label);
      if (!norm_part.ok()) return norm_part.status();
      uses.ReplaceAllUses(g, id, *norm_part);
      uses.ReplaceAllUses(g, sum, *sum_part);
      changed = true;
    }
    if (changed) g = WithoutDeadNodes(g);
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeFuseResidualRmsNorm() { return std::make_unique<FuseResidualRmsNorm>(); }

}  // namespace doppler::passes
