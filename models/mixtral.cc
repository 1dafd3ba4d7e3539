// The Mixtral family: Mistral's decoder whose MLPs are mixtures of experts (block_sparse_moe:
// w1 gate, w3 up, w2 down), each token's weights a softmax over its chosen experts' logits.
#include "absl/strings/str_cat.h"
#include "models/architecture.h"
#include "models/blocks.h"

namespace doppler::models {

absl::StatusOr<graph::Graph> BuildMixtral(const formats::ModelConfig& c, const BuildOptions& o) {
  absl::StatusOr<DecoderSpec> d = StandardDecoder(c);
  if (!d.ok()) return d.status();
  if (absl::Status s = SetSlidingWindows(c, [](int) { return true; }, *d); !s.ok()) return s;
  absl::StatusOr<MoeSpec> moe = ConfigMoe(c);
  if (!moe.ok()) return moe.status();
  moe->weighting = "softmax_chosen";
  for (size_t l = 0; l < d->layers.size(); ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".block_sparse_moe.");
    MoeSpec& s = d->layers[l].moe.emplace(*moe);
    s.router = p + "gate.weight";
    s.gate = [p](int64_t e) { return absl::StrCat(p, "experts.", e, ".w1.weight"); };
    s.up = [p](int64_t e) { return absl::StrCat(p, "experts.", e, ".w3.weight"); };
    s.down = [p](int64_t e) { return absl::StrCat(p, "experts.", e, ".w2.weight"); };
    s.gate_stacked = p + "experts.w1.weight";
    s.up_stacked = p + "experts.w3.weight";
    s.down_stacked = p + "experts.w2.weight";
  }
  return BuildDecoder(c, *d, o);
}

}  // namespace doppler::models
