// fuse-kv-append: the two cache writes a layer's attention reads (the k write with its rope and
// head norm prologues, the v write) become part of the attention: it writes the step's keys and
// values to the caches itself, then attends (graph/attention_inputs.h). A decode step then has no
// dispatch (and no barrier) between the projections and attention: the decode kernel takes the
// new key and value from its inputs and writes them once per kv head (codegen/emit_attention.cc).
//
//   before:  kc' = cache_write(kc, k, table[, wk]) {heads = kv_heads, style[, norm_eps]}
//            vc' = cache_write(vc, v)
//            o = attention(q, kc', vc'[, table[, wq]]) {...}
//   after:   o = attention(q, kc, vc[, table[, wq]], k, v[, wk]) {..., append = 1[, k_norm_eps, k_norm_offset]}
//
// Only where the k write rotates exactly when attention rotates q (the same table and style), and
// attention is the only reader of both writes. Run after fuse-rope and fuse-head-norm.
#include "graph/attention_inputs.h"
#include "graph/cache_write_inputs.h"
#include "passes/registry.h"
#include "passes/rewrite.h"

namespace doppler::passes {
namespace {

class FuseKvAppend : public Pass {
 public:
  const char* name() const override { return "fuse-kv-append"; }

  absl::StatusOr<bool> Run(Graph& g) const override {
    bool changed = false;
    UseLists uses(g);
    const int original = g.size();
    for (ValueId id = 0; id < original; ++id) {
      const Node att = g.node(id);
      if (att.kind != OpKind::kAttention || att.attrs.Int("append") == 1) continue;
      const graph::AttentionInputs a = graph::AttentionInputsOf(att);
      const Node kw = g.node(a.k_cache), vw = g.node(a.v_cache);
      if (kw.kind != OpKind::kCacheWrite || vw.kind != OpKind::kCacheWrite) continue;
      const graph::CacheWriteInputs k = graph::CacheWriteInputsOf(kw), v = graph::CacheWriteInputsOf(vw);
      if (v.rope) continue;
      if (uses.SoleUser(g, kw.id) != id || uses.SoleUser(g, vw.id) != id || kw.id == vw.id) continue;
      // The k write rotates iff q is rotated, by the same table and style, over the same heads.
      if (k.rope.has_value() != a.rope.has_value()) continue;
      if (k.rope && (*k.rope != *a.rope || kw.attrs.Str("style") != att.attrs.Str("style") ||
                     kw.attrs.Int("head_dim") != att.attrs.Int("head_dim") ||
                     kw.attrs.Int("heads") != att.attrs.Int("kv_heads"))) {
        continue;
      }
      graph::AttentionInputs fused = a;
      fused.k_cache = k.cache;
      fused.v_cache = v.cache;
      fused.k_new = k.x;
      fused.v_new = v.x;
      graph::Attrs attrs = att.attrs;
      attrs.Set("append", int64_t{1});
      if (k.x_norm) {
        fused.k_norm = *k.x_norm;
        attrs.Set("k_norm_eps", kw.attrs.Float("norm_eps"));
        attrs.Set("k_norm_offset", kw.attrs.Float("norm_offset"));
      }
      const std::vector<ValueId> inputs = graph::AttentionInputList(fused);
      if (absl::Status s = RebuildAs(g, uses, id, inputs, attrs, {kw.id, vw.id}); !s.ok()) return s;
      changed = true;
    }
    if (changed) g = WithoutDeadNodes(g);
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeFuseKvAppend() { return std::make_unique<FuseKvAppend>(); }

}  // namespace doppler::passes
