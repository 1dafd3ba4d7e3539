#include "graph/attention_inputs.h"

#include <algorithm>

#include "graph/layout.h"

namespace doppler::graph {

size_t AppendedInputCount(const Attrs& attrs) {
  return attrs.Int("append") == 1 ? (attrs.Has("k_norm_eps") ? 3 : 2) : 0;
}

AttentionInputs AttentionInputsOf(const Node& n) {
  AttentionInputs a;
  const size_t trailing = AppendedInputCount(n.attrs);
  const bool append = trailing > 0;
  const size_t base = n.inputs.size() >= trailing ? n.inputs.size() - trailing : 0;
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
  return a;
}

std::array<Node, 2> AppendedCacheWrites(const Graph& g, const Node& attention) {
  const AttentionInputs a = AttentionInputsOf(attention);
  Node k, v;
  for (Node* w : {&k, &v}) {
    w->id = attention.id;
    w->kind = OpKind::kCacheWrite;
    w->label = attention.label;
  }
  k.inputs = {a.k_cache, *a.k_new};
  k.type = g.node(a.k_cache).type;
  if (a.rope) {
    k.inputs.push_back(*a.rope);
    k.attrs.Set("heads", attention.attrs.Int("kv_heads"));
    k.attrs.Set("head_dim", attention.attrs.Int("head_dim"));
    k.attrs.Set("style", attention.attrs.Str("style"));
    if (a.k_norm) {
      k.inputs.push_back(*a.k_norm);
      k.attrs.Set("norm_eps", attention.attrs.Float("k_norm_eps"));
      k.attrs.Set("norm_offset", attention.attrs.Float("k_norm_offset"));
    }
  }
  v.inputs = {a.v_cache, *a.v_new};
  v.type = g.node(a.v_cache).type;
  return {k, v};
}

std::optional<ValueId> AttentionOfProjection(const Graph& g, ValueId matmul) {
  const Node& m = g.node(matmul);
  if (m.kind != OpKind::kMatMul || !m.attrs.Has("norm_eps") || !m.attrs.Str("epilogue").empty() ||
      SplitWidths(m).size() != 3) {
    return std::nullopt;
  }
  auto is_output = [&](ValueId v) {
    return std::any_of(g.outputs().begin(), g.outputs().end(), [&](const auto& o) { return o.second == v; });
  };
  if (is_output(matmul)) return std::nullopt;
  std::optional<ValueId> attention;
  std::array<ValueId, 3> parts = {-1, -1, -1};
  for (ValueId p : g.Users(matmul)) {
    const Node& part = g.node(p);
    if (part.kind != OpKind::kPart || is_output(p)) return std::nullopt;
    const int64_t index = part.attrs.Int("index");
    const std::vector<ValueId> users = g.Users(p);
    if (index < 0 || index > 2 || parts[static_cast<size_t>(index)] >= 0 || users.size() != 1) return std::nullopt;
    if (attention.has_value() && *attention != users[0]) return std::nullopt;
    attention = users[0];
    parts[static_cast<size_t>(index)] = p;
  }
  if (!attention.has_value()) return std::nullopt;
  const Node& att = g.node(*attention);
  if (att.kind != OpKind::kAttention || att.attrs.Int("append") != 1) return std::nullopt;
  const AttentionInputs a = AttentionInputsOf(att);
  if (a.q != parts[0] || a.k_new != parts[1] || a.v_new != parts[2]) return std::nullopt;
  for (ValueId p : parts) {
    if (std::count(att.inputs.begin(), att.inputs.end(), p) != 1) return std::nullopt;
  }
  return attention;
}

}  // namespace doppler::graph
