// fuse-residual-norm-matmul: a residual RMSNorm whose normalised sum only a matmul reads may be
// computed by that matmul's kernel as it reads x, instead of in a dispatch (and barrier level) of
// its own or at the end of the matmul that produced its input (fuse-matmul-tail). Every workgroup
// of the consumer computes the row (the norm's sum of squares, then the sum and its own), and one
// of them writes part 0 (the sum, which later residual adds read). This is Gemma 3's post-norm,
// residual add and next pre-norm, read by the next projection.
//
//   before:  s|n = rms_norm(x, w, r[, w']) {residual = 1, ...}      y = matmul(part(s|n, 1), w2) {E}
//   after:   s|n = rms_norm(x, w, r[, w']) {residual = 1, ..., in_consumer = 1}      (the same matmul)
//
// The norm keeps its node and meaning; in_consumer = 1 lets codegen give it no kernel where the
// matmul's variant takes it (codegen/matmul.h: NormInConsumer), and has the memory planner keep
// its inputs until the matmul. A norm may carry in_producer too: the consumer takes it first, then
// the producer's kernel, then a kernel of its own.
#include "graph/layout.h"
#include "passes/registry.h"
#include "passes/rewrite.h"

namespace doppler::passes {
namespace {

class FuseResidualNormMatmul : public Pass {
 public:
  const char* name() const override { return "fuse-residual-norm-matmul"; }

  absl::StatusOr<bool> Run(Graph& g) const override {
    bool changed = false;
    for (ValueId id = 0; id < g.size(); ++id) {
      const Node& n = g.node(id);
      if (n.kind != OpKind::kRmsNorm || n.attrs.Has("in_consumer") || n.attrs.Has("group")) continue;
      if (!graph::SoleMatmulOfNormedPart(g, id).has_value()) continue;
      g.mutable_node(id).attrs.Set("in_consumer", int64_t{1});
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeFuseResidualNormMatmul() { return std::make_unique<FuseResidualNormMatmul>(); }

}  // namespace doppler::passes
