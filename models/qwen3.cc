// The Qwen3 family (dense): the standard decoder with per-head RMSNorms on q and k before rope,
// and head_dim given by the config (not hidden / heads). Optional attention biases and sliding
// layers as in Qwen2.
#include "absl/strings/str_cat.h"
#include "models/architecture.h"
#include "models/qwen_decoder.h"

namespace doppler::models {

absl::StatusOr<DecoderSpec> Qwen3Decoder(const formats::ModelConfig& c) {
  absl::StatusOr<DecoderSpec> d = QwenDecoder(c, c.attention_bias, c.attention_bias);
  if (!d.ok()) return d.status();
  for (size_t l = 0; l < d->layers.size(); ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".self_attn.");
    d->layers[l].attn.q_norm = p + "q_norm.weight";
    d->layers[l].attn.k_norm = p + "k_norm.weight";
  }
  return d;
}

absl::StatusOr<graph::Graph> BuildQwen3(const formats::ModelConfig& c, const BuildOptions& o) {
  absl::StatusOr<DecoderSpec> d = Qwen3Decoder(c);
  if (!d.ok()) return d.status();
  return BuildDecoder(c, *d, o);
}

}  // namespace doppler::models
