// fuse-last-row-matmul: the last row of a step's values, read by one matmul alone (the LM head),
// may be read by that matmul's kernel straight from the rows, instead of copied by a dispatch (and
// barrier level) of its own.
//
//   before:  l = last_row(h)                        y = matmul(l, w, ...)
//   after:   l = last_row(h) {in_consumer = 1}      (the same matmul)
//
// The node keeps its meaning; in_consumer = 1 lets codegen give it no kernel where the matmul's
// variant reads row T - 1 of h itself (codegen/matmul.h: LastRowInConsumer), and has the memory
// planner keep h until the matmul. Runs after fuse-norm-matmul, which makes the LM head the reader
// of the row.
#include "graph/layout.h"
#include "passes/registry.h"
#include "passes/rewrite.h"

namespace doppler::passes {
namespace {

class FuseLastRowMatmul : public Pass {
 public:
  const char* name() const override { return "fuse-last-row-matmul"; }

  absl::StatusOr<bool> Run(Graph& g) const override {
    bool changed = false;
    for (ValueId id = 0; id < g.size(); ++id) {
      const Node& n = g.node(id);
      if (n.kind != OpKind::kLastRow || n.attrs.Has("in_consumer")) continue;
      if (!graph::SoleMatmulOfLastRow(g, id).has_value()) continue;
      g.mutable_node(id).attrs.Set("in_consumer", int64_t{1});
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeFuseLastRowMatmul() { return std::make_unique<FuseLastRowMatmul>(); }

}  // namespace doppler::passes
