// The GPT-OSS family: the standard decoder with biases on the attention projections (o_proj's
// too, where attention_bias), a learned sink logit per head joining each softmax, layers
// alternating sliding and full attention (layer_types, else sliding first), and mixture-of-experts
// MLPs whose router has a bias, whose weights are a softmax over the chosen logits, and whose
// experts have biases and a clamped SwiGLU (limit swiglu_limit, 7 where the config does not say;
// alpha 1.702). The checkpoint stacks the experts: mlp.experts.gate_up_proj [E, hidden, 2I] with
// gate and up interleaved in its last dimension, down_proj [E, I, hidden], each matrix stored
// [in, out]; the graph reads each expert's as a slice of them (graph/param_slice.h).
#include "absl/strings/str_cat.h"
#include "models/architecture.h"
#include "models/blocks.h"

namespace doppler::models {
namespace {

constexpr double kSwigluAlpha = 1.702;  // transformers' GptOssExperts.alpha

// Expert e's slice of the stacked tensor `tensor` (`rows` rows, or values of a vector, per expert),
// its rows from `offset` every `stride`.
std::function<ExpertTensor(int64_t)> ExpertSlice(const std::string& tensor, int64_t experts, int64_t rows,
                                                 int64_t offset, int64_t stride, bool matrix) {
  return [=](int64_t e) {
    graph::ParamSlice s{tensor, rows, offset, stride, experts, e, matrix};
    return ExpertTensor(absl::StrCat(tensor, "[", e, "][", offset, "::", stride, "]"), s);
  };
}

}  // namespace

absl::StatusOr<graph::Graph> BuildGptOss(const ModelConfig& c, const BuildOptions& o) {
  absl::StatusOr<DecoderSpec> d = StandardDecoder(c);
  if (!d.ok()) return d.status();
  if (absl::Status s = SetSlidingWindows(c, [](int l) { return l % 2 == 0; }, *d); !s.ok()) return s;
  absl::StatusOr<MoeSpec> moe = ConfigMoe(c);
  if (!moe.ok()) return moe.status();
  absl::StatusOr<double> limit = ConfigNumber(c, "swiglu_limit", 7.0);
  if (!limit.ok()) return limit.status();
  if (!(*limit > 0)) return absl::InvalidArgumentError("config: swiglu_limit must be positive");
  moe->weighting = "softmax_chosen";
  moe->clamped_swiglu = ClampedSwigluSpec{kSwigluAlpha, *limit};
  const int64_t experts = moe->experts, width = moe->intermediate, hidden = c.hidden_size;
  for (size_t l = 0; l < d->layers.size(); ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    AttentionSpec& a = d->layers[l].attn;
    if (c.attention_bias) {
      a.q_bias = p + "self_attn.q_proj.bias";
      a.k_bias = p + "self_attn.k_proj.bias";
      a.v_bias = p + "self_attn.v_proj.bias";
      a.o_bias = p + "self_attn.o_proj.bias";
    }
    a.sinks = p + "self_attn.sinks";
    MoeSpec& s = d->layers[l].moe.emplace(*moe);
    const std::string x = p + "mlp.experts.";
    s.router = p + "mlp.router.weight";
    s.router_bias = p + "mlp.router.bias";
    s.gate = ExpertSlice(x + "gate_up_proj", experts, 2 * width, 0, 2, true);
    s.up = ExpertSlice(x + "gate_up_proj", experts, 2 * width, 1, 2, true);
    s.down = ExpertSlice(x + "down_proj", experts, hidden, 0, 1, true);
    s.gate_bias = ExpertSlice(x + "gate_up_proj_bias", experts, 2 * width, 0, 2, false);
    s.up_bias = ExpertSlice(x + "gate_up_proj_bias", experts, 2 * width, 1, 2, false);
    s.down_bias = ExpertSlice(x + "down_proj_bias", experts, hidden, 0, 1, false);
  }
  return BuildDecoder(c, *d, o);
}

}  // namespace doppler::models
