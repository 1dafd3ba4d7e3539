#include "models/blocks.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/rope.h"

namespace doppler::models {

using graph::Dim;
using graph::DType;
using graph::TensorType;

ValueId RopeTable(GraphBuilder& b, const std::string& name, const formats::RopeConfig& rope, int rotary_dim, int64_t context) {
  const RopeFrequencies f = ComputeRope(rope, rotary_dim, context);
  const std::vector<float>& inv_freq = f.inv_freq;
  const float scale = f.attention_factor;  // as transformers: cos and sin times the factor, in float32
  const int64_t half = rotary_dim / 2;
  auto table = std::make_shared<std::vector<float>>(static_cast<size_t>(context * half * 2));
  for (int64_t p = 0; p < context; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * inv_freq[static_cast<size_t>(i)];
      (*table)[static_cast<size_t>((p * half + i) * 2)] = static_cast<float>(std::cos(static_cast<double>(angle))) * scale;
      (*table)[static_cast<size_t>((p * half + i) * 2 + 1)] = static_cast<float>(std::sin(static_cast<double>(angle))) * scale;
    }
  }
  return b.Const(name, TensorType{DType::kF32, {Dim::Static(context), Dim::Static(half), Dim::Static(2)}},
                 std::move(table));
}

namespace {
DType MatrixDType(const std::string& tensor, int64_t cols, const BuildOptions& o) {
  return o.dtype_of ? o.dtype_of(tensor, cols, o.weight_dtype) : o.weight_dtype;
}
}  // namespace

ValueId Matrix(GraphBuilder& b, const std::string& name, int64_t rows, int64_t cols, const BuildOptions& o) {
  return b.Param(name, TensorType{MatrixDType(name, cols, o), {Dim::Static(rows), Dim::Static(cols)}});
}

ValueId Vector(GraphBuilder& b, const std::string& name, int64_t n) {
  return b.Param(name, TensorType{DType::kF32, {Dim::Static(n)}});
}

ValueId MatrixRows(GraphBuilder& b, const std::string& source, int64_t source_rows, int64_t row_offset, int64_t rows,
                   int64_t cols, const BuildOptions& o) {
  return MatrixFrom(b, absl::StrCat(source, "[", row_offset, ":", row_offset + rows, "]"),
                    {source, source_rows, row_offset}, rows, cols, o);
}

ValueId MatrixFrom(GraphBuilder& b, const std::string& name, const graph::ParamSlice& slice, int64_t rows,
                   int64_t cols, const BuildOptions& o) {
  return b.ParamFrom(name, TensorType{MatrixDType(slice.source, cols, o), {Dim::Static(rows), Dim::Static(cols)}}, slice);
}

ValueId Norm(GraphBuilder& b, const NormSpec& norm, ValueId x, int64_t width, std::string_view label) {
  if (norm.weight.empty()) return x;
  return b.RmsNorm(x, Vector(b, norm.weight, width), norm.eps, norm.offset, label);
}

namespace {

// x · wᵀ (+ bias when named).
ValueId Linear(GraphBuilder& b, ValueId x, ValueId w, const std::string& bias, int64_t rows, const std::string& label) {
  ValueId y = b.MatMul(x, w, label);
  if (!bias.empty()) y = b.Add(y, Vector(b, bias, rows), absl::StrCat(label, ".bias"));
  return y;
}

}  // namespace

ValueId AttentionBlock(GraphBuilder& b, const AttentionSpec& s, ValueId x, int64_t hidden, ValueId rope_table,
                       int layer, const BuildOptions& o) {
  const int64_t q_width = s.heads * s.head_dim, kv_width = s.kv_heads * s.head_dim;
  ValueId wq, wk, wv;
  if (!s.qkv_fused.empty()) {
    const int64_t rows = q_width + 2 * kv_width;
    wq = MatrixRows(b, s.qkv_fused, rows, 0, q_width, hidden, o);
    wk = MatrixRows(b, s.qkv_fused, rows, q_width, kv_width, hidden, o);
    wv = MatrixRows(b, s.qkv_fused, rows, q_width + kv_width, kv_width, hidden, o);
  } else {
    wq = Matrix(b, s.q, q_width, hidden, o);
    wk = Matrix(b, s.k, kv_width, hidden, o);
    wv = Matrix(b, s.v, kv_width, hidden, o);
  }
  ValueId q = Linear(b, x, wq, s.q_bias, q_width, "attn.q_proj");
  ValueId k = Linear(b, x, wk, s.k_bias, kv_width, "attn.k_proj");
  ValueId v = Linear(b, x, wv, s.v_bias, kv_width, "attn.v_proj");
  if (!s.q_norm.empty()) {
    q = b.GroupRmsNorm(q, Vector(b, s.q_norm, s.head_dim), s.head_dim, s.qk_norm_eps, s.qk_norm_offset, "attn.q_norm");
  }
  if (!s.k_norm.empty()) {
    k = b.GroupRmsNorm(k, Vector(b, s.k_norm, s.head_dim), s.head_dim, s.qk_norm_eps, s.qk_norm_offset, "attn.k_norm");
  }
  q = b.Rope(q, rope_table, s.heads, s.head_dim, "neox", "attn.q_rope");
  k = b.Rope(k, rope_table, s.kv_heads, s.head_dim, "neox", "attn.k_rope");
  // A sliding-window layer's cache is a ring of window + max_step_tokens - 1 rows (position p in
  // row p % capacity). Why that is enough: a step writes the keys of its T <= max_step_tokens
  // positions pos..pos+T-1 before attention reads any, and the oldest key a query of the step
  // needs is that of pos - window + 1 (the first query's window). Key j is overwritten only by
  // key j + capacity >= pos - window + 1 + window + T - 1 = pos + T, which no step up to this one
  // has written. Full-attention layers keep every position (capacity = context).
  int64_t capacity = o.context;
  if (s.window > 0 && o.max_step_tokens > 0) capacity = std::min(capacity, s.window + o.max_step_tokens - 1);
  if (o.paging.paged()) capacity = o.kv_pages * o.paging.page_rows;
  const TensorType cache_type{o.kv_dtype, {Dim::Static(capacity), Dim::Static(kv_width)}};
  ValueId k_cache = b.State(absl::StrCat("kv.", layer, ".k"), cache_type);
  ValueId v_cache = b.State(absl::StrCat("kv.", layer, ".v"), cache_type);
  k_cache = b.CacheWrite(k_cache, k, "attn.k_cache_write");
  v_cache = b.CacheWrite(v_cache, v, "attn.v_cache_write");
  ValueId sinks = s.sinks.empty() ? -1 : Vector(b, s.sinks, s.heads);
  ValueId a = b.Attention(q, k_cache, v_cache, s.heads, s.kv_heads, s.head_dim, s.scale, s.window, "attn.attention",
                          sinks);
  return Linear(b, a, Matrix(b, s.o, hidden, q_width, o), s.o_bias, hidden, "attn.o_proj");
}

absl::StatusOr<Activation> ParseActivation(const std::string& hidden_act) {
  if (hidden_act == "silu" || hidden_act == "swish") return Activation::kSilu;
  if (hidden_act == "gelu_pytorch_tanh" || hidden_act == "gelu_tanh") return Activation::kGeluTanh;
  return absl::UnimplementedError(absl::StrCat("unsupported MLP activation '", hidden_act,
                                               "' (supported: silu, gelu_pytorch_tanh)"));
}

ValueId GatedMlp(GraphBuilder& b, const MlpSpec& s, ValueId x, int64_t hidden, const BuildOptions& o) {
  ValueId wg, wu;
  if (!s.gate_up_fused.empty()) {
    wg = MatrixRows(b, s.gate_up_fused, 2 * s.intermediate, 0, s.intermediate, hidden, o);
    wu = MatrixRows(b, s.gate_up_fused, 2 * s.intermediate, s.intermediate, s.intermediate, hidden, o);
  } else {
    wg = Matrix(b, s.gate, s.intermediate, hidden, o);
    wu = Matrix(b, s.up, s.intermediate, hidden, o);
  }
  ValueId g = b.MatMul(x, wg, "mlp.gate_proj");
  ValueId u = b.MatMul(x, wu, "mlp.up_proj");
  g = s.act == Activation::kGeluTanh ? b.GeluTanh(g, "mlp.act") : b.Silu(g, "mlp.act");
  return b.MatMul(b.Mul(g, u, "mlp.gate_mul"), Matrix(b, s.down, hidden, s.intermediate, o), "mlp.down_proj");
}

void LmHead(GraphBuilder& b, ValueId h, ValueId final_norm, double eps, double norm_offset, ValueId lm_head,
            const BuildOptions& o) {
  b.SetScope("");
  // Without per-token logits only the last token's row goes through the norm and the head.
  if (!o.logits_all_tokens) h = b.LastRow(h, "last_token");
  ValueId normed = b.RmsNorm(h, final_norm, eps, norm_offset, "final_norm");
  ValueId logits = b.MatMul(normed, lm_head, "lm_head");
  b.Output("logits", logits);
}

absl::StatusOr<DecoderSpec> StandardDecoder(const formats::ModelConfig& c) {
  absl::StatusOr<Activation> act = ParseActivation(c.hidden_act);
  if (!act.ok()) return act.status();
  DecoderSpec d;
  d.rope = c.rope;
  d.rope_local = c.rope_local;
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    DecoderLayerSpec layer;
    layer.input_norm = {p + "input_layernorm.weight", c.rms_norm_eps};
    layer.attn = {c.num_heads,
                  c.num_kv_heads,
                  c.head_dim,
                  1.0 / std::sqrt(static_cast<double>(c.head_dim)),
                  0,
                  p + "self_attn.q_proj.weight",
                  p + "self_attn.k_proj.weight",
                  p + "self_attn.v_proj.weight",
                  p + "self_attn.o_proj.weight"};
    layer.attn.qk_norm_eps = c.rms_norm_eps;
    layer.pre_mlp_norm = {p + "post_attention_layernorm.weight", c.rms_norm_eps};
    layer.mlp = {c.intermediate_size, p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight",
                 p + "mlp.down_proj.weight", *act};
    d.layers.push_back(std::move(layer));
  }
  d.final_norm = {"model.norm.weight", c.rms_norm_eps};
  if (!c.tie_word_embeddings) d.lm_head = "lm_head.weight";
  return d;
}

absl::StatusOr<graph::Graph> BuildDecoder(const formats::ModelConfig& c, const DecoderSpec& d, const BuildOptions& o) {
  GraphBuilder b;
  const int64_t hidden = c.hidden_size;
  ValueId ids = b.Input("ids", TensorType{DType::kI32, {Dim::Tokens()}});
  ValueId embed = Matrix(b, d.embed, c.vocab_size, hidden, o);
  ValueId rope = RopeTable(b, "rope", d.rope, static_cast<int>(d.layers.empty() ? c.head_dim : d.layers[0].attn.head_dim),
                           o.context);
  ValueId rope_local = -1;
  ValueId h = b.Embedding(embed, ids, "embed_tokens");
  if (d.embed_scale != 1.0) h = b.Scale(h, d.embed_scale, "embed_scale");
  for (size_t l = 0; l < d.layers.size(); ++l) {
    const DecoderLayerSpec& s = d.layers[l];
    b.SetScope(absl::StrCat("layers.", l));  // labels: layers.3.attn.q_proj, ...
    ValueId table = rope;
    if (s.local_rope) {
      if (!d.rope_local) return absl::InvalidArgumentError(absl::StrCat("layer ", l, " asks for a local rope, none given"));
      if (rope_local < 0) rope_local = RopeTable(b, "rope_local", *d.rope_local, static_cast<int>(s.attn.head_dim), o.context);
      table = rope_local;
    }
    ValueId x = Norm(b, s.input_norm, h, hidden, "input_norm");
    ValueId a = AttentionBlock(b, s.attn, x, hidden, table, static_cast<int>(l), o);
    h = b.Add(h, Norm(b, s.post_attn_norm, a, hidden, "attn.post_norm"), "attn.residual");
    x = Norm(b, s.pre_mlp_norm, h, hidden, "mlp_norm");
    ValueId m = s.moe ? MoeMlp(b, *s.moe, x, hidden, o) : GatedMlp(b, s.mlp, x, hidden, o);
    h = b.Add(h, Norm(b, s.post_mlp_norm, m, hidden, "mlp.post_norm"), "mlp.residual");
  }
  ValueId lm_head = d.lm_head.empty() ? embed : Matrix(b, d.lm_head, c.vocab_size, hidden, o);
  LmHead(b, h, Vector(b, d.final_norm.weight, hidden), d.final_norm.eps, d.final_norm.offset, lm_head, o);
  return std::move(b).Finish();
}

absl::StatusOr<double> ConfigNumber(const formats::ModelConfig& c, const char* key, double fallback) {
  auto it = c.raw.find(key);
  if (it == c.raw.end() || it->is_null()) return fallback;
  if (!it->is_number()) {
    return absl::InvalidArgumentError(absl::StrCat("config key '", key, "' must be a number, got ", it->dump()));
  }
  return it->get<double>();
}

absl::StatusOr<int64_t> ConfigCount(const formats::ModelConfig& c, const char* key, int64_t fallback, int64_t max) {
  absl::StatusOr<double> v = ConfigNumber(c, key, static_cast<double>(fallback));
  if (!v.ok()) return v.status();
  // Compared as doubles first: a cast of a value past int64's range would be undefined.
  if (!(*v >= 1 && *v <= static_cast<double>(max) && std::floor(*v) == *v)) {
    return absl::InvalidArgumentError(absl::StrCat("config key '", key, "' must be an integer from 1 to ", max, ", got ", *v));
  }
  return static_cast<int64_t>(*v);
}

absl::StatusOr<bool> ConfigBool(const formats::ModelConfig& c, const char* key, bool fallback) {
  auto it = c.raw.find(key);
  if (it == c.raw.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat("config key '", key, "' must be true or false, got ", it->dump()));
  }
  return it->get<bool>();
}

absl::Status SetSlidingWindows(const formats::ModelConfig& c, const std::function<bool(int)>& by_default, DecoderSpec& d) {
  for (size_t l = 0; l < d.layers.size(); ++l) {
    const int layer = static_cast<int>(l);
    bool sliding = c.sliding_window.has_value() && by_default(layer);
    if (!c.layer_types.empty()) {
      const std::string& t = c.layer_types[l];
      if (t != "sliding_attention" && t != "full_attention") {
        return absl::UnimplementedError(absl::StrCat("config: layer_types[", l, "] is '", t,
                                                     "'; supported: sliding_attention, full_attention"));
      }
      sliding = t == "sliding_attention";
    }
    if (sliding && !c.sliding_window) {
      return absl::InvalidArgumentError(absl::StrCat("config: layer ", l, " is a sliding_attention layer but the "
                                                     "config gives no sliding_window"));
    }
    d.layers[l].attn.window = sliding ? *c.sliding_window : 0;
  }
  return absl::OkStatus();
}

}  // namespace doppler::models
