// The Qwen3-MoE family: Qwen3's decoder whose MLPs are mixtures of experts, except the layers
// listed in mlp_only_layers and those off the decoder_sparse_step, which keep a dense MLP. The
// router's softmax over all experts is renormalised over the chosen ones when norm_topk_prob.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "models/architecture.h"
#include "models/qwen_decoder.h"

namespace doppler::models {
namespace {

absl::StatusOr<std::vector<int64_t>> MlpOnlyLayers(const formats::ModelConfig& c) {
  std::vector<int64_t> layers;
  auto it = c.raw.find("mlp_only_layers");
  if (it == c.raw.end() || it->is_null()) return layers;
  if (!it->is_array()) return absl::InvalidArgumentError("config key 'mlp_only_layers' must be a list of layer numbers");
  for (const auto& v : *it) {
    if (!v.is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat("config key 'mlp_only_layers' holds ", v.dump(), ", not a layer number"));
    }
    layers.push_back(v.get<int64_t>());
  }
  return layers;
}

}  // namespace

absl::StatusOr<graph::Graph> BuildQwen3Moe(const formats::ModelConfig& c, const BuildOptions& o) {
  absl::StatusOr<DecoderSpec> d = Qwen3Decoder(c);
  if (!d.ok()) return d.status();
  absl::StatusOr<MoeSpec> moe = ConfigMoe(c);
  if (!moe.ok()) return moe.status();
  absl::StatusOr<bool> norm_topk = ConfigBool(c, "norm_topk_prob", false);
  if (!norm_topk.ok()) return norm_topk.status();
  absl::StatusOr<int64_t> step = ConfigCount(c, "decoder_sparse_step", 1, int64_t{1} << 30);
  if (!step.ok()) return step.status();
  absl::StatusOr<std::vector<int64_t>> dense = MlpOnlyLayers(c);
  if (!dense.ok()) return dense.status();
  moe->weighting = *norm_topk ? "softmax_chosen" : "softmax_all";
  for (size_t l = 0; l < d->layers.size(); ++l) {
    const int64_t layer = static_cast<int64_t>(l);
    if (std::find(dense->begin(), dense->end(), layer) != dense->end() ||
        (layer + 1) % *step != 0) {
      continue;
    }
    const std::string p = absl::StrCat("model.layers.", l, ".mlp.");
    MoeSpec& s = d->layers[l].moe.emplace(*moe);
    s.router = p + "gate.weight";
    s.gate = [p](int64_t e) { return absl::StrCat(p, "experts.", e, ".gate_proj.weight"); };
    s.up = [p](int64_t e) { return absl::StrCat(p, "experts.", e, ".up_proj.weight"); };
    s.down = [p](int64_t e) { return absl::StrCat(p, "experts.", e, ".down_proj.weight"); };
    s.gate_stacked = p + "experts.gate_proj.weight";
    s.up_stacked = p + "experts.up_proj.weight";
    s.down_stacked = p + "experts.down_proj.weight";
  }
  return BuildDecoder(c, *d, o);
}

}  // namespace doppler::models
