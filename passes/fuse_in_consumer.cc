// Ops a consumer's kernel may compute as it reads their values, instead of in a dispatch (and
// barrier level) of their own: each pass marks one kind with in_consumer = 1 where one node alone
// reads the op's value (graph::Consumer). The op keeps its node and meaning; codegen gives it no kernel
// where the consumer's kernel takes it, and the memory planner keeps its inputs until the consumer.
//
// fuse-residual-norm-matmul: a residual RMSNorm whose normalised sum only a matmul reads (Gemma
// 3's post-norm, residual add and next pre-norm, read by the next projection). Every workgroup of
// the consumer computes the row (the norm's sum of squares, then the sum and its own), and one of
// them writes part 0 (the sum, which later residual adds read); codegen/matmul.h: NormInConsumer.
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
//
// fuse-projection-attention: a q/k/v projection (fuse-qkv, with its norm prologue) whose three
// parts one appending attention alone reads (fuse-kv-append; graph::AttentionOfProjection). The
// decode attention kernel may compute the rows of its head itself (codegen/attention_projection.h),
// so that a decode step has no barrier level between the projection and attention. Runs after
// fuse-kv-append.
//
//   before:  y = matmul(x, w, nw) {norm_eps, split = "Q,K,V"}    o = attention(part(y, 0), kc, vc, ..., part(y, 1), part(y, 2))
//   after:   y = matmul(x, w, nw) {norm_eps, split = "Q,K,V", in_consumer = 1}    (the same attention)
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
      if (n.kind != kind_ || n.attrs.Has("in_consumer") || !graph::Consumer(g, id).has_value()) continue;
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

std::unique_ptr<Pass> MakeFuseProjectionAttention() {
  return std::make_unique<FuseInConsumer>("fuse-projection-attention", OpKind::kMatMul);
}

}  // namespace doppler::passes
