// fuse-argmax: an argmax of a matmul's rows (the LM head's, in the step graph) may be computed by the
// matmul's kernel as it writes the rows: each workgroup keeps the first maximum of the columns it
// wrote, and the last workgroup to finish reduces theirs. The step saves the argmax's own dispatch,
// which reads every logit again, and its barrier level.
//
//   before:  logits = matmul(x, w) {E}      next = argmax(logits)
//   after:   logits = matmul(x, w) {E}      next = argmax(logits) {in_producer = 1}
//
// The argmax keeps its node and meaning; in_producer = 1 lets codegen give it no kernel where the
// matmul's variant takes it (codegen/matmul.h: ArgmaxInMatMul), and has the memory planner keep its
// value from the matmul on. Applies where the matmul's value is not split.
#include "graph/layout.h"
#include "passes/registry.h"
#include "passes/rewrite.h"

namespace doppler::passes {
namespace {

class FuseArgmax : public Pass {
 public:
  const char* name() const override { return "fuse-argmax"; }

  absl::StatusOr<bool> Run(Graph& g) const override {
    bool changed = false;
    for (ValueId id = 0; id < g.size(); ++id) {
      Node& n = g.mutable_node(id);
      if (n.kind != OpKind::kArgmax || n.attrs.Has("in_producer")) continue;
      const Node& x = g.node(n.inputs[0]);
      if (x.kind != OpKind::kMatMul || !graph::SplitWidths(x).empty()) continue;
      n.attrs.Set("in_producer", int64_t{1});
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeFuseArgmax() { return std::make_unique<FuseArgmax>(); }

}  // namespace doppler::passes
