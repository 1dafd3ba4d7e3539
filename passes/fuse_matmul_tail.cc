// fuse-matmul-tail: a row-wide op reading a matmul's rows may be computed by the matmul's kernel
// as it writes them, instead of in a dispatch (and barrier level) of its own:
//  - an argmax (the LM head's, in the step graph): each workgroup keeps the first maximum of the
//    columns it wrote, and the last workgroup to finish reduces theirs;
//  - a whole-row RMSNorm (Gemma 3's post-norm, residual add and next pre-norm after the output and
//    down projections): the last workgroup normalises the rows the others wrote.
//
//   before:  y = matmul(x, w) {E}      t = argmax(y)  |  rms_norm(y, g, ...) {...}
//   after:   y = matmul(x, w) {E}      t = argmax(y) {in_producer = 1}  |  rms_norm(...) {..., in_producer = 1}
//
// The op keeps its node and meaning; in_producer = 1 lets codegen give it no kernel where the
// matmul's variant takes it (codegen/matmul.h: TailInMatMul), and has the memory planner keep its
// value from the matmul on. Applies where the matmul's value is not split.
#include "graph/layout.h"
#include "graph/rms_norm_inputs.h"
#include "passes/registry.h"
#include "passes/rewrite.h"

namespace doppler::passes {
namespace {

bool RowWide(const Node& n) {
  return n.kind == OpKind::kArgmax || (n.kind == OpKind::kRmsNorm && !graph::RmsNormInputsOf(n).group);
}

class FuseMatmulTail : public Pass {
 public:
  const char* name() const override { return "fuse-matmul-tail"; }

  absl::StatusOr<bool> Run(Graph& g) const override {
    bool changed = false;
    for (ValueId id = 0; id < g.size(); ++id) {
      Node& n = g.mutable_node(id);
      if (!RowWide(n) || n.attrs.Has("in_producer")) continue;
      const Node& x = g.node(n.inputs[0]);
      if (x.kind != OpKind::kMatMul || !graph::SplitWidths(x).empty()) continue;
      n.attrs.Set("in_producer", int64_t{1});
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeFuseMatmulTail() { return std::make_unique<FuseMatmulTail>(); }

}  // namespace doppler::passes
