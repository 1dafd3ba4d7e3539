// The Phi-3 family: the standard decoder, but the checkpoint fuses the attention projections into
// qkv_proj (rows [q | k | v]) and the MLP's gate and up into gate_up_proj (rows [gate | up]); the
// graph keeps separate q/k/v/gate/up params that are row slices of those tensors. A config with a
// sliding_window slides on every layer.
#include "absl/strings/str_cat.h"
#include "models/architecture.h"
#include "models/blocks.h"

namespace doppler::models {

absl::StatusOr<graph::Graph> BuildPhi3(const formats::ModelConfig& c, const BuildOptions& o) {
  absl::StatusOr<DecoderSpec> d = StandardDecoder(c);
  if (!d.ok()) return d.status();
  double rotary = 1.0;
  if (auto it = c.raw.find("rope_parameters"); it != c.raw.end() && it->is_object()) {
    if (auto f = it->find("partial_rotary_factor"); f != it->end() && f->is_number()) rotary = f->get<double>();
  }
  absl::StatusOr<double> top = ConfigNumber(c, "partial_rotary_factor", rotary);
  if (!top.ok()) return top.status();
  if (*top != 1.0) return absl::UnimplementedError(absl::StrCat("Phi3: partial_rotary_factor ", *top, " is not supported"));
  for (size_t l = 0; l < d->layers.size(); ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    d->layers[l].attn.qkv_fused = p + "self_attn.qkv_proj.weight";
    d->layers[l].mlp.gate_up_fused = p + "mlp.gate_up_proj.weight";
  }
  if (absl::Status s = SetSlidingWindows(c, [](int) { return true; }, *d); !s.ok()) return s;
  return BuildDecoder(c, *d, o);
}

}  // namespace doppler::models
