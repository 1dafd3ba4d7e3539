// The Qwen3 family (dense): the standard decoder with per-head RMSNorms on q and k before rope,
// and head_dim given by the config (not hidden / heads). Optional attention biases and sliding
// layers as in Qwen2.
#include "absl/strings/str_cat.h"
#include "models/architecture.h"
#include "models/blocks.h"

namespace doppler::models {

absl::StatusOr<graph::Graph> BuildQwen3(const ModelConfig& c, const BuildOptions& o) {
  absl::StatusOr<DecoderSpec> d = StandardDecoder(c);
  if (!d.ok()) return d.status();
  for (size_t l = 0; l < d->layers.size(); ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".self_attn.");
    AttentionSpec& a = d->layers[l].attn;
    a.q_norm = p + "q_norm.weight";
    a.k_norm = p + "k_norm.weight";
    if (c.attention_bias) {
      a.q_bias = p + "q_proj.bias";
      a.k_bias = p + "k_proj.bias";
      a.v_bias = p + "v_proj.bias";
      a.o_bias = p + "o_proj.bias";
    }
  }
  absl::StatusOr<double> first_sliding = ConfigNumber(c, "max_window_layers", 28);
  if (!first_sliding.ok()) return first_sliding.status();
  auto by_default = [&](int l) { return l >= *first_sliding; };
  if (absl::Status s = SetSlidingWindows(c, by_default, *d); !s.ok()) return s;
  return BuildDecoder(c, *d, o);
}

}  // namespace doppler::models
