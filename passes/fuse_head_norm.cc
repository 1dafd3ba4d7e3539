// fuse-head-norm: a per-head RMSNorm (Qwen 3's and Gemma 3's q and k norms) read only by a cache
// write or attention that already rotates its input (fuse-rope) becomes that op's prologue: the
// op normalises each head as it loads it, then rotates it.
//
//   before:  n = rms_norm(k, w) {group = head_dim}   c = cache_write(cache, n, table) {...}
//   after:   c = cache_write(cache, k, table, w) {..., norm_eps, norm_offset}
//   before:  n = rms_norm(q, w) {group = head_dim}   o = attention(n, kc, vc, table) {...}
//   after:   o = attention(q, kc, vc, table, w) {..., norm_eps, norm_offset}
//
// Run after fuse-rope.
#include "graph/attention_inputs.h"
#include "graph/cache_write_inputs.h"
#include "graph/rms_norm_inputs.h"
#include "passes/registry.h"
#include "passes/rewrite.h"

namespace doppler::passes {
namespace {

class FuseHeadNorm : public Pass {
 public:
  const char* name() const override { return "fuse-head-norm"; }

  absl::StatusOr<bool> Run(Graph& g) const override {
    bool changed = false;
    UseLists uses(g);
    const int original = g.size();
    for (ValueId id = 0; id < original; ++id) {
      const Node norm = g.node(id);
      if (norm.kind != OpKind::kRmsNorm) continue;
      const graph::RmsNormInputs rn = graph::RmsNormInputsOf(norm);
      if (!rn.group || rn.residual) continue;
      const ValueId user = uses.SoleUser(g, id);
      if (user < 0) continue;
      const Node u = g.node(user);
      // The input that rope rotates: cache_write's x, attention's q.
      graph::AttentionInputs a;
      graph::CacheWriteInputs w;
      if (u.kind == OpKind::kAttention) a = graph::AttentionInputsOf(u);
      if (u.kind == OpKind::kCacheWrite) w = graph::CacheWriteInputsOf(u);
      const bool cache_write = u.kind == OpKind::kCacheWrite && w.rope && !w.x_norm && w.x == id;
      const bool attention = u.kind == OpKind::kAttention && a.rope && !a.q_norm && !a.k_new && a.q == id;
      if ((!cache_write && !attention) || *rn.group != u.attrs.Int("head_dim")) continue;
      std::vector<ValueId> inputs;
      if (cache_write) {
        w.x = rn.x;
        w.x_norm = rn.w;
        inputs = graph::CacheWriteInputList(w);
      } else {
        a.q = rn.x;
        a.q_norm = rn.w;
        inputs = graph::AttentionInputList(a);
      }
      graph::Attrs attrs = u.attrs;
      SetNormPrologue(attrs, norm);
      if (absl::Status s = RebuildAs(g, uses, user, inputs, attrs, {id}); !s.ok()) return s;
      changed = true;
    }
    if (changed) g = WithoutDeadNodes(g);
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeFuseHeadNorm() { return std::make_unique<FuseHeadNorm>(); }

}  // namespace doppler::passes
