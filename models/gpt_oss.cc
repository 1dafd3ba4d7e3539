// The GPT-OSS family: the standard decoder with biases on the attention projections (o_proj's
// too, where attention_bias), a learned sink logit per head joining each softmax, layers
// alternating sliding and full attention (layer_types, else sliding first), and mixture-of-experts
// MLPs whose router has a bias, whose weights are a softmax over the chosen logits, and whose
// experts have biases and a clamped SwiGLU (limit swiglu_limit, 7 where the config does not say;
// alpha 1.702). The checkpoint stacks the experts: mlp.experts.gate_up_proj [E, hidden, 2I] with
// gate and up interleaved in its last dimension, down_proj [E, I, hidden], each matrix stored
// [in, out]; the graph reads each expert's as a slice of them (graph/param_slice.h). Published
// checkpoints (quantization_config.quant_method "mxfp4") hold those two in MXFP4 instead, each
// matrix [out, in] (its blocks run along in; formats/safetensors.h serves the pairs of tensors
// transformers writes as one), gate and up interleaved in the rows. A GGUF stores them stacked
// with gate and up apart (BuildOptions::stacked_experts, the names below).
#include "absl/strings/str_cat.h"
#include "models/architecture.h"
#include "models/blocks.h"

namespace doppler::models {
namespace {

constexpr double kSwigluAlpha = 1.702;  // transformers' GptOssExperts.alpha

// Expert e's slice of the stacked tensor `tensor` (`rows` rows, or values of a vector, per expert),
// its rows from `offset` every `stride`; `in_out`: each expert's matrix is stored [in, out].
std::function<ExpertTensor(int64_t)> ExpertSlice(const std::string& tensor, int64_t experts, int64_t rows,
                                                 int64_t offset, int64_t stride, bool in_out) {
  return [=](int64_t e) {
    graph::ParamSlice s{tensor, rows, offset, stride, experts, e, in_out};
    return ExpertTensor(absl::StrCat(tensor, "[", e, "][", offset, "::", stride, "]"), s);
  };
}

// Whether the config says the experts' matrices are stored in MXFP4 (quantization_config).
absl::StatusOr<bool> Mxfp4Experts(const formats::ModelConfig& c) {
  auto q = c.raw.find("quantization_config");
  if (q == c.raw.end() || q->is_null()) return false;
  auto method = q->is_object() ? q->find("quant_method") : q->end();
  if (!q->is_object() || method == q->end() || !method->is_string()) {
    return absl::InvalidArgumentError("config key 'quantization_config' must be an object with a 'quant_method' string");
  }
  if (*method != "mxfp4") {
    return absl::UnimplementedError(absl::StrCat("config: quantization_config.quant_method '", method->get<std::string>(),
                                                 "' is not supported (supported: mxfp4)"));
  }
  return true;
}

}  // namespace

absl::StatusOr<graph::Graph> BuildGptOss(const formats::ModelConfig& c, const BuildOptions& o) {
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
  absl::StatusOr<bool> mxfp4 = Mxfp4Experts(c);
  if (!mxfp4.ok()) return mxfp4.status();
  const bool in_out = !*mxfp4;  // transformers' float experts are [in, out], its MXFP4 ones [out, in]
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
    s.gate = ExpertSlice(x + "gate_up_proj", experts, 2 * width, 0, 2, in_out);
    s.up = ExpertSlice(x + "gate_up_proj", experts, 2 * width, 1, 2, in_out);
    s.down = ExpertSlice(x + "down_proj", experts, hidden, 0, 1, in_out);
    s.gate_bias = ExpertSlice(x + "gate_up_proj_bias", experts, 2 * width, 0, 2, false);
    s.up_bias = ExpertSlice(x + "gate_up_proj_bias", experts, 2 * width, 1, 2, false);
    s.down_bias = ExpertSlice(x + "down_proj_bias", experts, hidden, 0, 1, false);
    // A GGUF's (gguf_arch.cc): gate and up apart, each matrix [out, in].
    s.gate_stacked = x + "gate_proj.weight";
    s.up_stacked = x + "up_proj.weight";
    s.down_stacked = x + "down_proj.weight";
    s.gate_bias_stacked = x + "gate_proj.bias";
    s.up_bias_stacked = x + "up_proj.bias";
    s.down_bias_stacked = x + "down_proj.bias";
  }
  return BuildDecoder(c, *d, o);
}

}  // namespace doppler::models
