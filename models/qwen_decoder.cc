#include "models/qwen_decoder.h"

#include "absl/strings/str_cat.h"

namespace doppler::models {

absl::StatusOr<DecoderSpec> QwenDecoder(const formats::ModelConfig& c, bool qkv_bias, bool o_bias) {
  absl::StatusOr<DecoderSpec> d = StandardDecoder(c);
  if (!d.ok()) return d.status();
  for (size_t l = 0; l < d->layers.size(); ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".self_attn.");
    AttentionSpec& a = d->layers[l].attn;
    if (qkv_bias) {
      a.q_bias = p + "q_proj.bias";
      a.k_bias = p + "k_proj.bias";
      a.v_bias = p + "v_proj.bias";
    }
    if (o_bias) a.o_bias = p + "o_proj.bias";
  }
  absl::StatusOr<double> first_sliding = ConfigNumber(c, "max_window_layers", 28);
  if (!first_sliding.ok()) return first_sliding.status();
  auto by_default = [&](int l) { return l >= *first_sliding; };
  if (absl::Status s = SetSlidingWindows(c, by_default, *d); !s.ok()) return s;
  return d;
}

}  // namespace doppler::models
