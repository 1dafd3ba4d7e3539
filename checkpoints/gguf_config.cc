// GGUF metadata -> the equivalent HF config.json -> ParseHfConfig, so both formats share one set
// of checks and defaults.
#include "checkpoints/gguf_config.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "checkpoints/gguf_arch.h"
#include "checkpoints/gguf_experts.h"
#include "formats/gguf/gguf_key_names.h"
#include "models/rope.h"
#include "nlohmann/json.hpp"
#include "quant/quant.h"

namespace doppler::checkpoints {
namespace {

using nlohmann::json;

// Llama 3 checkpoints all use these; GGUF does not store them (see RecoverLlama3Rope).
constexpr float kLlama3LowFreqFactor = 1.0f, kLlama3HighFreqFactor = 4.0f;

absl::Status Bad(const formats::GgufFile& f, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(f.path(), ": ", what));
}

absl::StatusOr<std::optional<double>> OptFloat(const formats::GgufFile& f, const std::string& key) {
  if (f.Find(key) == nullptr) return std::optional<double>();
  absl::StatusOr<double> v = f.GetFloat(key);
  if (!v.ok()) return v.status();
  return std::optional<double>(*v);
}

// llama.cpp keeps Llama 3's RoPE scaling as a tensor of per-frequency divisors r_i
// (inv_freq_i / r_i is used), not as parameters. With wavelength w_i = 2*pi / inv_freq_i,
// Llama 3 scaling gives r_i = 1 for w_i < orig/high, r_i = factor for w_i > orig/low, and in
// between 1/r_i = (1 - s)/factor + s with s = (orig/w_i - low) / (high - low). So factor is the
// largest divisor, and any in-between divisor gives orig = w_i * (low + s * (high - low)) for
// the standard low = 1, high = 4. The recovered parameters are accepted only if they reproduce
// every divisor, so a file made another way is an error rather than a silently wrong rope.
absl::StatusOr<json> RecoverLlama3Rope(const formats::GgufFile& f, float theta, int rotary_dim, const std::string& arch) {
  absl::StatusOr<formats::TensorView> t = f.Get("rope_freqs.weight");
  if (!t.ok()) return t.status();
  const int64_t n = rotary_dim / 2;
  if (t->shape != std::vector<int64_t>{n} || !graph::IsFloat(t->dtype)) {
    return Bad(f, absl::StrCat("rope_freqs.weight must be a float vector of ", n, " values (half the rotary dims)"));
  }
  std::vector<float> r(n);
  if (absl::Status st = quant::DequantizeRow(t->dtype, t->data, n, r.data()); !st.ok()) return st;
  if (std::all_of(r.begin(), r.end(), [](float x) { return x == 1.0f; })) {
    return json{{"rope_type", "default"}, {"rope_theta", theta}};  // divisors that change nothing
  }
  const float factor = r.back();
  const std::vector<float> base = models::ComputeRope(formats::RopeConfig{theta, {}}, rotary_dim, 0).inv_freq;
  std::optional<double> orig;
  for (int64_t i = 0; i < n && !orig; ++i) {
    if (!(r[i] > 1.0f && r[i] < factor)) continue;
    const double w = 2 * M_PI / base[i];
    const double s = (1.0 / r[i] - 1.0 / factor) / (1.0 - 1.0 / factor);
    orig = std::round(w * (kLlama3LowFreqFactor + s * (kLlama3HighFreqFactor - kLlama3LowFreqFactor)));
  }
  if (!orig) {  // no divisor in the transition band: only the metadata can say
    absl::StatusOr<std::optional<int64_t>> ctx = f.GetOptionalInt(absl::StrCat(arch, ".rope.scaling.original_context_length"));
    if (!ctx.ok()) return ctx.status();
    if (*ctx) orig = static_cast<double>(**ctx);
  }
  formats::RopeConfig rope{theta, formats::RopeScaling{"llama3", factor, kLlama3LowFreqFactor, kLlama3HighFreqFactor, 0}};
  if (orig && *orig >= 1 && *orig <= 1e9) rope.scaling.original_max_position_embeddings = static_cast<int>(*orig);
  const std::vector<float> scaled =
      rope.scaling.original_max_position_embeddings > 0 ? models::ComputeRope(rope, rotary_dim, 0).inv_freq : std::vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    if (scaled.empty() || !(std::fabs(base[i] / scaled[i] - r[i]) <= 1e-4f * r[i])) {
      return Bad(f, absl::StrCat("rope_freqs.weight is not Llama 3 RoPE scaling with low_freq_factor 1 and "
                                 "high_freq_factor 4 (divisor ", i, " is ", r[i], "), which is the only kind doppler reads"));
    }
  }
  return json{{"rope_type", "llama3"},
              {"rope_theta", theta},
              {"factor", factor},
              {"low_freq_factor", kLlama3LowFreqFactor},
              {"high_freq_factor", kLlama3HighFreqFactor},
              {"original_max_position_embeddings", rope.scaling.original_max_position_embeddings}};
}

// A float vector tensor as a JSON list (LongRoPE's factors).
absl::StatusOr<json> FloatList(const formats::GgufFile& f, const std::string& name, int64_t n) {
  absl::StatusOr<formats::TensorView> t = f.Get(name);
  if (!t.ok()) return t.status();
  if (t->shape != std::vector<int64_t>{n} || !graph::IsFloat(t->dtype)) {
    return Bad(f, absl::StrCat(name, " must be a float vector of ", n, " values (half the rotary dims)"));
  }
  std::vector<float> v(static_cast<size_t>(n));
  if (absl::Status st = quant::DequantizeRow(t->dtype, t->data, n, v.data()); !st.ok()) return st;
  return json(v);
}

// YaRN as llama.cpp keeps it: rope.scaling.factor, .original_context_length, .yarn_beta_fast /
// .yarn_beta_slow, and .attn_factor, which llama.cpp multiplies into YaRN's own 0.1 ln(factor) + 1.
// llama.cpp always rounds the ramp's ends to whole dimensions (transformers' truncate); only
// doppler's own key rope.scaling.yarn_truncate = false (kYarnTruncateKey, written for configs that
// say truncate false, e.g. GPT-OSS's) keeps them as they are.
absl::StatusOr<json> YarnParameters(const formats::GgufFile& f, const std::string& p, float theta) {
  absl::StatusOr<double> factor = f.GetFloat(p + "rope.scaling.factor");
  if (!factor.ok()) return factor.status();
  json r = {{"rope_type", "yarn"}, {"rope_theta", theta}, {"factor", *factor}};
  for (auto [key, hf_key] : {std::pair{"rope.scaling.yarn_beta_fast", "beta_fast"},
                             std::pair{"rope.scaling.yarn_beta_slow", "beta_slow"}}) {
    absl::StatusOr<std::optional<double>> v = OptFloat(f, p + key);
    if (!v.ok()) return v.status();
    if (*v) r[hf_key] = **v;
  }
  absl::StatusOr<std::optional<int64_t>> orig = f.GetOptionalInt(p + "rope.scaling.original_context_length");
  if (!orig.ok()) return orig.status();
  if (*orig) r["original_max_position_embeddings"] = **orig;
  absl::StatusOr<std::optional<double>> attn = OptFloat(f, p + "rope.scaling.attn_factor");
  if (!attn.ok()) return attn.status();
  if (*attn) r["attention_factor"] = **attn * (*factor > 1 ? 0.1 * std::log(*factor) + 1.0 : 1.0);
  if (f.Find(p + formats::kYarnTruncateKey) != nullptr) {
    absl::StatusOr<bool> truncate = f.GetBool(p + formats::kYarnTruncateKey);
    if (!truncate.ok()) return truncate.status();
    r["truncate"] = *truncate;
  }
  return r;
}

// LongRoPE as llama.cpp keeps it (Phi-3): the rope_factors_long / rope_factors_short tensors,
// rope.scaling.original_context_length and rope.scaling.attn_factor.
absl::StatusOr<json> LongRopeParameters(const formats::GgufFile& f, const std::string& p, float theta, int head_dim) {
  json r = {{"rope_type", "longrope"}, {"rope_theta", theta}};
  for (auto [tensor, hf_key] : {std::pair{"rope_factors_long.weight", "long_factor"},
                                std::pair{"rope_factors_short.weight", "short_factor"}}) {
    absl::StatusOr<json> v = FloatList(f, tensor, head_dim / 2);
    if (!v.ok()) return v.status();
    r[hf_key] = *std::move(v);
  }
  absl::StatusOr<std::optional<int64_t>> orig = f.GetOptionalInt(p + "rope.scaling.original_context_length");
  if (!orig.ok()) return orig.status();
  if (*orig) r["original_max_position_embeddings"] = **orig;
  absl::StatusOr<std::optional<double>> attn = OptFloat(f, p + "rope.scaling.attn_factor");
  if (!attn.ok()) return attn.status();
  if (*attn) r["attention_factor"] = **attn;
  return r;
}

// The rope_parameters object of the global rope: plain, linear or yarn (rope.scaling.type),
// Llama 3 (rope_freqs) or LongRoPE (rope_factors_long/short).
absl::StatusOr<json> RopeParameters(const formats::GgufFile& f, const std::string& arch, int head_dim) {
  const std::string p = absl::StrCat(arch, ".");
  absl::StatusOr<std::optional<double>> base = OptFloat(f, p + "rope.freq_base");
  if (!base.ok()) return base.status();
  const float theta = static_cast<float>(base->value_or(10000.0));
  absl::StatusOr<std::optional<int64_t>> dims = f.GetOptionalInt(p + "rope.dimension_count");
  if (!dims.ok()) return dims.status();
  if (*dims && **dims != head_dim) {
    return Bad(f, absl::StrCat(p, "rope.dimension_count is ", **dims, " but the head size is ", head_dim,
                               ": partial rotary embeddings are not supported"));
  }
  std::string type = "none";
  if (f.Find(p + "rope.scaling.type") != nullptr) {
    absl::StatusOr<std::string> t = f.GetString(p + "rope.scaling.type");
    if (!t.ok()) return t.status();
    type = *t;
  }
  const bool longrope = f.Has("rope_factors_long.weight") || f.Has("rope_factors_short.weight");
  if (f.Has("rope_freqs.weight") || longrope) {
    if (type != "none" && !(longrope && type == "longrope")) {
      return Bad(f, absl::StrCat("both rope factor tensors and ", type, " rope scaling are given"));
    }
    return longrope ? LongRopeParameters(f, p, theta, head_dim) : RecoverLlama3Rope(f, theta, head_dim, arch);
  }
  if (type == "none") return json{{"rope_type", "default"}, {"rope_theta", theta}};
  if (type == "yarn") return YarnParameters(f, p, theta);
  if (type != "linear") {
    return Bad(f, absl::StrCat(p, "rope.scaling.type '", type, "' is not supported (none, linear, yarn)"));
  }
  absl::StatusOr<double> factor = f.GetFloat(p + "rope.scaling.factor");
  if (!factor.ok()) return factor.status();
  return json{{"rope_type", "linear"}, {"rope_theta", theta}, {"factor", *factor}};
}

}  // namespace

absl::StatusOr<formats::ModelConfig> ConfigFromGguf(const formats::GgufFile& f) {
  absl::StatusOr<std::string> arch_name = f.GetString("general.architecture");
  if (!arch_name.ok()) return arch_name.status();
  const GgufArch* arch = FindGgufArch(*arch_name);
  if (arch == nullptr) {
    return Bad(f, absl::StrCat("architecture '", *arch_name, "' is not supported (supported: ", GgufArchNames(), ")"));
  }
  const std::string p = absl::StrCat(*arch_name, ".");
  json j = {{"architectures", {arch->hf_class}}, {"model_type", arch->model_type}, {"hidden_act", arch->hidden_act}};
  // Required hyperparameters, then optional ones (ParseHfConfig checks ranges and defaults).
  for (auto [gguf_key, hf_key] : {std::pair{"block_count", "num_hidden_layers"}, std::pair{"embedding_length", "hidden_size"},
                                  std::pair{"feed_forward_length", "intermediate_size"},
                                  std::pair{"attention.head_count", "num_attention_heads"}}) {
    absl::StatusOr<int64_t> v = f.GetInt(p + gguf_key);
    if (!v.ok()) return v.status();
    j[hf_key] = *v;
  }
  for (auto [gguf_key, hf_key] : {std::pair{"attention.head_count_kv", "num_key_value_heads"},
                                  std::pair{"attention.key_length", "head_dim"},
                                  std::pair{"context_length", "max_position_embeddings"}, std::pair{"vocab_size", "vocab_size"}}) {
    absl::StatusOr<std::optional<int64_t>> v = f.GetOptionalInt(p + gguf_key);
    if (!v.ok()) return v.status();
    if (*v) j[hf_key] = **v;
  }
  if (!j.contains("vocab_size")) {  // older files: the tokenizer's vocabulary is the embedding's
    absl::StatusOr<uint64_t> n = f.GetArrayLength("tokenizer.ggml.tokens");
    if (!n.ok()) return Bad(f, absl::StrCat("neither ", p, "vocab_size nor tokenizer.ggml.tokens gives the vocabulary size"));
    j["vocab_size"] = *n;
  }
  absl::StatusOr<double> eps = f.GetFloat(p + "attention.layer_norm_rms_epsilon");
  if (!eps.ok()) return eps.status();
  j["rms_norm_eps"] = *eps;
  for (auto [gguf_key, hf_key] : {std::pair{"tokenizer.ggml.bos_token_id", "bos_token_id"},
                                  std::pair{"tokenizer.ggml.eos_token_id", "eos_token_id"}}) {
    absl::StatusOr<std::optional<int64_t>> v = f.GetOptionalInt(gguf_key);
    if (!v.ok()) return v.status();
    if (*v) j[hf_key] = **v;
  }
  j["tie_word_embeddings"] = !f.Has("output.weight");
  j["attention_bias"] = f.Has("blk.0.attn_q.bias");

  // The head size is needed to check the rope; a bad value is reported by ParseHfConfig below.
  const int64_t heads = j["num_attention_heads"].get<int64_t>();
  const int64_t head_dim = j.contains("head_dim") ? j["head_dim"].get<int64_t>()
                           : heads > 0            ? j["hidden_size"].get<int64_t>() / heads
                                                  : 0;
  if (head_dim > 0 && head_dim <= (1 << 20)) {
    absl::StatusOr<json> rope = RopeParameters(f, *arch_name, static_cast<int>(head_dim));
    if (!rope.ok()) return rope.status();
    j["rope_parameters"] = *std::move(rope);
  }
  // Sliding-window layers: llama.cpp writes the window (0: none) and, for Gemma 3, the local
  // layers' rope base; which layers slide is the family's default (Gemma 3: all but every 6th,
  // as llama.cpp assumes; Phi-3: all).
  absl::StatusOr<std::optional<int64_t>> window = f.GetOptionalInt(p + "attention.sliding_window");
  if (!window.ok()) return window.status();
  if (*window && **window > 0) j["sliding_window"] = **window;
  absl::StatusOr<std::optional<double>> swa_base = OptFloat(f, p + "rope.freq_base_swa");
  if (!swa_base.ok()) return swa_base.status();
  if (*swa_base && j.contains("rope_parameters")) {
    j["rope_parameters"] = {{"full_attention", j["rope_parameters"]},
                            {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", **swa_base}}}};
  }
  if (arch->extra_config != nullptr) {
    if (absl::Status st = arch->extra_config(f, j); !st.ok()) return st;
  }
  if (absl::Status st = AddGgufExpertsConfig(f, *arch, j); !st.ok()) return st;
  absl::StatusOr<formats::ModelConfig> config = formats::ParseHfConfig(j, absl::StrCat(f.path(), " (GGUF metadata)"));
  if (!config.ok()) return formats::InGgufTerms(config.status(), *arch_name);  // told in the file's keys
  if (absl::Status st = CheckGgufExperts(f, *arch, *config); !st.ok()) return st;
  return config;
}

}  // namespace doppler::checkpoints
