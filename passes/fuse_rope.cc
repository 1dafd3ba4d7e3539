// fuse-rope: a rotary embedding read by one op that can rotate as it loads becomes that op's
// prologue, so the rotated values are never written.
//
//   before:  r = rope(k, table) {heads, head_dim, style}   c = cache_write(cache, r)
//   after:   c = cache_write(cache, k, table) {heads, head_dim, style}
//   before:  r = rope(q, table) {...}   o = attention(r, kc, vc) {...}
//   after:   o = attention(q, kc, vc, table) {..., style}   (the same heads and head_dim)
//
// Applies when the rope's only reader is that op (as its rotated input).
#include "graph/attention_inputs.h"
#include "graph/cache_write_inputs.h"
#include "passes/registry.h"
#include "passes/rewrite.h"

namespace doppler::passes {
namespace {

class FuseRope : public Pass {
 public:
  const char* name() const override { return "fuse-rope"; }

  absl::StatusOr<bool> Run(Graph& g) const override {
    bool changed = false;
    UseLists uses(g);
    const int original = g.size();
    for (ValueId id = 0; id < original; ++id) {
      const Node rope = g.node(id);
      if (rope.kind != OpKind::kRope) continue;
      const ValueId user = uses.SoleUser(g, id);
      if (user < 0) continue;
      const Node u = g.node(user);
      std::vector<ValueId> inputs;
      graph::Attrs attrs = u.attrs;
      graph::AttentionInputs a;
      graph::CacheWriteInputs w;
      if (u.kind == OpKind::kAttention) a = graph::AttentionInputsOf(u);
      if (u.kind == OpKind::kCacheWrite) w = graph::CacheWriteInputsOf(u);
      if (u.kind == OpKind::kCacheWrite && !w.rope && w.x == id && w.cache != id) {
        w.x = rope.inputs[0];
        w.rope = rope.inputs[1];
        inputs = graph::CacheWriteInputList(w);
        attrs.Set("heads", rope.attrs.Int("heads"));
        attrs.Set("head_dim", rope.attrs.Int("head_dim"));
      } else if (u.kind == OpKind::kAttention && !a.rope && !a.k_new && a.q == id && a.k_cache != id &&
                 a.v_cache != id && a.sinks != id && u.attrs.Int("heads") == rope.attrs.Int("heads") &&
                 u.attrs.Int("head_dim") == rope.attrs.Int("head_dim")) {
        a.q = rope.inputs[0];
        a.rope = rope.inputs[1];
        inputs = graph::AttentionInputList(a);
      } else {
        continue;
      }
      attrs.Set("style", rope.attrs.Str("style"));
      if (absl::Status s = RebuildAs(g, uses, user, inputs, attrs, {id}); !s.ok()) return s;
      changed = true;
    }
    if (changed) g = WithoutDeadNodes(g);
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeFuseRope() { return std::make_unique<FuseRope>(); }

}  // namespace doppler::passes
