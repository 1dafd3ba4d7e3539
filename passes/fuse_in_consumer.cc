// Ops a matmul's kernel may compute as it reads its x, instead of in a dispatch (and barrier level)
// of their own: each pass marks one kind with in_consumer = 1 where matmuls alone read the op's
// value, as x (graph::ConsumingMatmuls). The op keeps its node and meaning; codegen gives it no kernel
// where the matmul's variant takes it, and the memory planner keeps its inputs until the matmul.
//
// fuse-residual-norm-matmul: a residual RMSNorm whose normalised sum only matmuls read (Gemma 3's
// post-norm, residual add and next pre-norm, read by the next projections: one, or two where v's
// weight type differs from q's and k's). Every workgroup of each consumer computes the row (the
// norm's sum of squares, then the sum and its own), and one workgroup of the first consumer writes
// part 0 (the sum, which later residual adds read); codegen/matmul.h: NormInConsumer.
// It also spares the matmul that produced the norm's input a tail (fuse-matmul-tail): a norm may
// carry in_producer too, and the consumer takes it first, then the producer's kernel, then a
// kernel of its own.
//
//   before:  s|n = rms_norm(x, w, r[, w']) {residual = 1, ...}      y = matmul(part(s|n, 1), w2) {E}
//   after:   s|n = rms_norm(x, w, r[, w']) {residual = 1, ..., in_consumer = 1}      (the same matmul)
//
// fuse-last-row-matmul: the last row of a step's values, read by one matmul alone (the LM head):
// every matmul variant reads row T - 1 of h itself (codegen/matmul.h: LastRowInConsumer), so the
// row is never copied. Runs after fuse-norm-matmul, which makes the LM head the reader of the row.
//
//   before:  l = last_row(h)                        y = matmul(l, w, ...)
//   after:   l = last_row(h) {in_consumer = 1}      (the same matmul)
#include "graph/layout.h"
#include "passes/registry.h"
#include "passes/rewrite.h"

namespace doppler::passes {
namespace {

class FuseInConsumer : public Pass {
 public:
  FuseInConsumer(const char* name, OpKind kind) : name_(name), kind_(kind) {}
  const char* name() const override { return name_; }

  absl::StatusOr<bool> Run(Graph& g) const override {
    bool changed = false;
    for (ValueId id = 0; id < g.size(); ++id) {
      const Node& n = g.node(id);
      if (n.kind != kind_ || n.attrs.Has("in_consumer") || graph::ConsumingMatmuls(g, id).empty()) continue;
      g.mutable_node(id).attrs.Set("in_consumer", int64_t{1});
      changed = true;
    }
    return changed;
  }

 private:
  const char* name_;
  OpKind kind_;
};

}  // namespace

std::unique_ptr<Pass> MakeFuseResidualNormMatmul() {
  return std::make_unique<FuseInConsumer>("fuse-residual-norm-matmul", OpKind::kRmsNorm);
}

std::unique_ptr<Pass> MakeFuseLastRowMatmul() {
  return std::make_unique<FuseInConsumer>("fuse-last-row-matmul", OpKind::kLastRow);
}

}  // namespace doppler::passes
