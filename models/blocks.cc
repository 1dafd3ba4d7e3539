#include "models/blocks.h"

#include <cmath>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"

namespace doppler::models {

using graph::Dim;
using graph::DType;
using graph::TensorType;

ValueId RopeTable(GraphBuilder& b, const std::string& name, const RopeConfig& rope, int rotary_dim, int64_t context) {
  const std::vector<float> inv_freq = RopeInvFreq(rope, rotary_dim);
  const int64_t half = rotary_dim / 2;
  auto table = std::make_shared<std::vector<float>>(static_cast<size_t>(context * half * 2));
  for (int64_t p = 0; p < context; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * inv_freq[static_cast<size_t>(i)];
      (*table)[static_cast<size_t>((p * half + i) * 2)] = static_cast<float>(std::cos(static_cast<double>(angle)));
      (*table)[static_cast<size_t>((p * half + i) * 2 + 1)] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
  return b.Const(name, TensorType{DType::kF32, {Dim::Static(context), Dim::Static(half), Dim::Static(2)}},
                 std::move(table));
}

ValueId Matrix(GraphBuilder& b, const std::string& name, int64_t rows, int64_t cols, const BuildOptions& o) {
  return b.Param(name, TensorType{o.weight_dtype, {Dim::Static(rows), Dim::Static(cols)}});
}

ValueId Vector(GraphBuilder& b, const std::string& name, int64_t n) {
  return b.Param(name, TensorType{DType::kF32, {Dim::Static(n)}});
}

ValueId AttentionBlock(GraphBuilder& b, const AttentionSpec& s, ValueId x, int64_t hidden, ValueId rope_table,
                       int layer, const BuildOptions& o) {
  const int64_t q_width = s.heads * s.head_dim, kv_width = s.kv_heads * s.head_dim;
  ValueId q = b.MatMul(x, Matrix(b, s.q, q_width, hidden, o), "attn.q_proj");
  ValueId k = b.MatMul(x, Matrix(b, s.k, kv_width, hidden, o), "attn.k_proj");
  ValueId v = b.MatMul(x, Matrix(b, s.v, kv_width, hidden, o), "attn.v_proj");
  q = b.Rope(q, rope_table, s.heads, s.head_dim, "neox", "attn.q_rope");
  k = b.Rope(k, rope_table, s.kv_heads, s.head_dim, "neox", "attn.k_rope");
  const TensorType cache_type{o.kv_dtype, {Dim::Static(o.context), Dim::Static(kv_width)}};
  ValueId k_cache = b.State(absl::StrCat("kv.", layer, ".k"), cache_type);
  ValueId v_cache = b.State(absl::StrCat("kv.", layer, ".v"), cache_type);
  k_cache = b.CacheWrite(k_cache, k, "attn.k_cache_write");
  v_cache = b.CacheWrite(v_cache, v, "attn.v_cache_write");
  ValueId a = b.Attention(q, k_cache, v_cache, s.heads, s.kv_heads, s.head_dim, s.scale, s.window, "attn.attention");
  return b.MatMul(a, Matrix(b, s.o, hidden, q_width, o), "attn.o_proj");
}

ValueId GatedMlp(GraphBuilder& b, ValueId x, int64_t hidden, int64_t intermediate, const std::string& gate,
                 const std::string& up, const std::string& down, const BuildOptions& o) {
  ValueId g = b.MatMul(x, Matrix(b, gate, intermediate, hidden, o), "mlp.gate_proj");
  ValueId u = b.MatMul(x, Matrix(b, up, intermediate, hidden, o), "mlp.up_proj");
  ValueId m = b.Mul(b.Silu(g, "mlp.act"), u, "mlp.gate_mul");
  return b.MatMul(m, Matrix(b, down, hidden, intermediate, o), "mlp.down_proj");
}

void LmHead(GraphBuilder& b, ValueId h, ValueId final_norm, double eps, double norm_offset, ValueId lm_head,
            const BuildOptions& o) {
  b.SetScope("");
  // Without per-token logits only the last token's row goes through the norm and the head.
  if (!o.logits_all_tokens) h = b.LastRow(h, "last_token");
  ValueId normed = b.RmsNorm(h, final_norm, eps, norm_offset, "final_norm");
  ValueId logits = b.MatMul(normed, lm_head, "lm_head");
  b.Output("logits", logits);
  b.Output("next_token", b.Argmax(o.logits_all_tokens ? b.LastRow(logits, "last_logits") : logits, "argmax"));
}

}  // namespace doppler::models
