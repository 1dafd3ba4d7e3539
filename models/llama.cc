// The Llama family (Llama 2/3, TinyLlama, stories*): pre-norm decoder, GQA, rope (with llama3
// scaling), SiLU-gated MLP, tied or untied LM head.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "models/architecture.h"
#include "models/blocks.h"

namespace doppler::models {

absl::StatusOr<graph::Graph> BuildLlama(const ModelConfig& c, const BuildOptions& o) {
  using graph::Dim;
  using graph::DType;
  GraphBuilder b;
  const int64_t hidden = c.hidden_size;
  ValueId ids = b.Input("ids", graph::TensorType{DType::kI32, {Dim::Tokens()}});
  ValueId embed = Matrix(b, "model.embed_tokens.weight", c.vocab_size, hidden, o);
  ValueId rope = RopeTable(b, "rope", c.rope, c.head_dim, o.context);
  ValueId h = b.Embedding(embed, ids, "embed_tokens");
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    b.SetScope(absl::StrCat("layers.", l));
    AttentionSpec attn{c.num_heads, c.num_kv_heads, c.head_dim, 1.0 / std::sqrt(static_cast<double>(c.head_dim)), 0,
                       p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
                       p + "self_attn.v_proj.weight", p + "self_attn.o_proj.weight"};
    ValueId x = b.RmsNorm(h, Vector(b, p + "input_layernorm.weight", hidden), c.rms_norm_eps, 0.0, "input_norm");
    h = b.Add(h, AttentionBlock(b, attn, x, hidden, rope, l, o), "attn.residual");
    x = b.RmsNorm(h, Vector(b, p + "post_attention_layernorm.weight", hidden), c.rms_norm_eps, 0.0, "post_attn_norm");
    h = b.Add(h, GatedMlp(b, x, hidden, c.intermediate_size, p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight",
                          p + "mlp.down_proj.weight", o),
              "mlp.residual");
  }
  ValueId lm_head = c.tie_word_embeddings ? embed : Matrix(b, "lm_head.weight", c.vocab_size, hidden, o);
  LmHead(b, h, Vector(b, "model.norm.weight", hidden), c.rms_norm_eps, 0.0, lm_head, o);
  return std::move(b).Finish();
}

}  // namespace doppler::models
