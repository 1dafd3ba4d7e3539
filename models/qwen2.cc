// The Qwen2 family (Qwen2, Qwen2.5): the standard decoder with biases on the q, k and v
// projections. With use_sliding_window, layers from max_window_layers on slide (unless the config
// lists layer_types).
#include "models/architecture.h"
#include "models/qwen_decoder.h"

namespace doppler::models {

absl::StatusOr<graph::Graph> BuildQwen2(const formats::ModelConfig& c, const BuildOptions& o) {
  absl::StatusOr<DecoderSpec> d = QwenDecoder(c, /*qkv_bias=*/true, /*o_bias=*/false);
  if (!d.ok()) return d.status();
  return BuildDecoder(c, *d, o);
}

}  // namespace doppler::models
