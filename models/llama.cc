// The Llama family (Llama 2/3, TinyLlama, stories*): pre-norm decoder, GQA, rope (with llama3
// scaling), SiLU-gated MLP, tied or untied LM head: the standard decoder itself, plus the q/k/v/o
// biases of configs with attention_bias.
#include "absl/strings/str_cat.h"
#include "models/architecture.h"
#include "models/blocks.h"

namespace doppler::models {

absl::StatusOr<graph::Graph> BuildLlama(const formats::ModelConfig& c, const BuildOptions& o) {
  absl::StatusOr<DecoderSpec> d = StandardDecoder(c);
  if (!d.ok()) return d.status();
  absl::StatusOr<bool> mlp_bias = ConfigBool(c, "mlp_bias", false);
  if (!mlp_bias.ok()) return mlp_bias.status();
  if (*mlp_bias) return absl::UnimplementedError("Llama: mlp_bias is not supported");
  if (c.attention_bias) {
    for (size_t l = 0; l < d->layers.size(); ++l) {
      const std::string p = absl::StrCat("model.layers.", l, ".self_attn.");
      AttentionSpec& a = d->layers[l].attn;
      a.q_bias = p + "q_proj.bias";
      a.k_bias = p + "k_proj.bias";
      a.v_bias = p + "v_proj.bias";
      a.o_bias = p + "o_proj.bias";
    }
  }
  return BuildDecoder(c, *d, o);
}

}  // namespace doppler::models
