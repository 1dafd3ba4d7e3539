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
      if (norm.kind != OpKind::kRmsNorm || !norm.attrs.Has("group") || norm.attrs.Int("residual") != 0) continue;
      const ValueId user = uses.SoleUser(g, id);
      if (user < 0) continue;
      const Node u = g.node(user);
      // The input that rope rotates: cache_write's x (input 1), attention's q (input 0).
      graph::AttentionInputs a;
      if (u.kind == OpKind::kAttention) a = graph::AttentionInputsOf(u);
      const bool cache_write = u.kind == OpKind::kCacheWrite && u.inputs.size() == 3 && u.inputs[1] == id;
      const bool attention = u.kind == OpKind::kAttention && a.rope && !a.q_norm && !a.k_new && a.q == id;
      if ((!cache_write && !attention) || norm.attrs.Int("group") != u.attrs.Int("head_dim")) continue;
      std::vector<ValueId> inputs = u.inputs;
      if (cache_write) {
        inputs[1] = norm.inputs[0];
        inputs.push_back(norm.inputs[1]);
      } else {
        a.q = norm.inputs[0];
        a.q_norm = norm.inputs[1];
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
