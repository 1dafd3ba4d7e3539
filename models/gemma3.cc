// The Gemma 3 family (text): the standard decoder with
//  - embeddings × sqrt(hidden) (a float32 constant; the tied LM head uses the unscaled matrix),
//  - (1 + w) RMSNorms, and "sandwich" norms: input, post_attention, pre_feedforward, post_feedforward,
//  - per-head q/k RMSNorms before rope,
//  - attention scaled by query_pre_attn_scalar^-0.5,
//  - sliding-window layers (layer_types, else every sliding_window_pattern-th layer is global) with
//    their own rope (rope_local, base 10000 by default, unscaled) next to global layers,
//  - a GELU-tanh gated MLP.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "models/architecture.h"
#include "models/blocks.h"

namespace doppler::models {

absl::StatusOr<graph::Graph> BuildGemma3(const formats::ModelConfig& c, const BuildOptions& o) {
  absl::StatusOr<DecoderSpec> d = StandardDecoder(c);
  if (!d.ok()) return d.status();
  for (const char* key : {"final_logit_softcapping", "attn_logit_softcapping"}) {
    auto it = c.raw.find(key);
    if (it != c.raw.end() && !it->is_null()) return absl::UnimplementedError(absl::StrCat("Gemma3: ", key, " is not supported"));
  }
  absl::StatusOr<bool> bidirectional = ConfigBool(c, "use_bidirectional_attention", false);
  if (!bidirectional.ok()) return bidirectional.status();
  if (*bidirectional) return absl::UnimplementedError("Gemma3: use_bidirectional_attention is not supported");
  absl::StatusOr<double> scalar = ConfigNumber(c, "query_pre_attn_scalar", c.head_dim);
  if (!scalar.ok()) return scalar.status();
  if (!(*scalar > 0)) return absl::InvalidArgumentError("config key 'query_pre_attn_scalar' must be positive");
  absl::StatusOr<int64_t> every = ConfigCount(c, "sliding_window_pattern", 6, int64_t{1} << 30);
  if (!every.ok()) return every.status();

  d->embed_scale = static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size)));
  if (!d->rope_local) d->rope_local = formats::RopeConfig{10000.0f, formats::RopeScaling{}};
  const double eps = c.rms_norm_eps;
  for (size_t l = 0; l < d->layers.size(); ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    DecoderLayerSpec& s = d->layers[l];
    s.input_norm.offset = 1.0;
    s.post_attn_norm = {p + "post_attention_layernorm.weight", eps, 1.0};
    s.pre_mlp_norm = {p + "pre_feedforward_layernorm.weight", eps, 1.0};
    s.post_mlp_norm = {p + "post_feedforward_layernorm.weight", eps, 1.0};
    s.attn.scale = 1.0 / std::sqrt(*scalar);
    s.attn.q_norm = p + "self_attn.q_norm.weight";
    s.attn.k_norm = p + "self_attn.k_norm.weight";
    s.attn.qk_norm_offset = 1.0;
  }
  d->final_norm.offset = 1.0;
  if (absl::Status s = SetSlidingWindows(c, [&](int l) { return (l + 1) % *every != 0; }, *d); !s.ok()) return s;
  for (DecoderLayerSpec& s : d->layers) s.local_rope = s.attn.window > 0;
  return BuildDecoder(c, *d, o);
}

}  // namespace doppler::models
