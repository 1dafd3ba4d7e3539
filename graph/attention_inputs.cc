#include "graph/attention_inputs.h"

#include "graph/cache_write_inputs.h"

namespace doppler::graph {

size_t AppendedInputCount(const Attrs& attrs) {
  return attrs.Int("append") == 1 ? (attrs.Has("k_norm_eps") ? 3 : 2) : 0;
}

AttentionInputs AttentionInputsOf(const Node& n) {
  AttentionInputs a;
  const size_t trailing = AppendedInputCount(n.attrs);
  const bool append = trailing > 0;
  const size_t sinks = n.attrs.Int("sinks") == 1 ? 1 : 0;
  const size_t base = n.inputs.size() >= trailing + sinks ? n.inputs.size() - trailing - sinks : 0;
  auto at = [&](size_t i) { return i < n.inputs.size() ? n.inputs[i] : ValueId{-1}; };
  a.q = at(0);
  a.k_cache = at(1);
  a.v_cache = at(2);
  if (base >= 4) a.rope = at(3);
  if (base >= 5) a.q_norm = at(4);
  if (append) {
    a.k_new = at(base);
    a.v_new = at(base + 1);
    if (trailing == 3) a.k_norm = at(base + 2);
  }
  if (sinks == 1 && !n.inputs.empty()) a.sinks = n.inputs.back();
  return a;
}

std::vector<ValueId> AttentionInputList(const AttentionInputs& a) {
  std::vector<ValueId> in = {a.q, a.k_cache, a.v_cache};
  for (const std::optional<ValueId>& v : {a.rope, a.q_norm, a.k_new, a.v_new, a.k_norm, a.sinks}) {
    if (v) in.push_back(*v);
  }
  return in;
}

std::array<Node, 2> AppendedCacheWrites(const Graph& g, const Node& attention) {
  const AttentionInputs a = AttentionInputsOf(attention);
  Node k, v;
  for (Node* w : {&k, &v}) {
    w->id = attention.id;
    w->kind = OpKind::kCacheWrite;
    w->label = attention.label;
  }
  CacheWriteInputs kin{.cache = a.k_cache, .x = *a.k_new};
  k.type = g.node(a.k_cache).type;
  if (a.rope) {
    kin.rope = a.rope;
    k.attrs.Set("heads", attention.attrs.Int("kv_heads"));
    k.attrs.Set("head_dim", attention.attrs.Int("head_dim"));
    k.attrs.Set("style", attention.attrs.Str("style"));
    if (a.k_norm) {
      kin.x_norm = a.k_norm;
      k.attrs.Set("norm_eps", attention.attrs.Float("k_norm_eps"));
      k.attrs.Set("norm_offset", attention.attrs.Float("k_norm_offset"));
    }
  }
  k.inputs = CacheWriteInputList(kin);
  v.inputs = CacheWriteInputList({.cache = a.v_cache, .x = *a.v_new});
  v.type = g.node(a.v_cache).type;
  return {k, v};
}

Node PlainAttention(const Node& attention) {
  AttentionInputs a = AttentionInputsOf(attention);
  a.k_new = a.v_new = a.k_norm = std::nullopt;
  Node plain = attention;
  plain.inputs = AttentionInputList(a);
  plain.attrs.Set("append", int64_t{0});
  return plain;
}

}  // namespace doppler::graph
