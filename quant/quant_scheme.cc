#include "quant/quant_scheme.h"

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace doppler::quant {
namespace {

using graph::DType;

// The layer index of "model.layers.N.<...>", or -1.
int LayerOf(std::string_view name) {
  constexpr std::string_view kPrefix = "model.layers.";
  if (!name.starts_with(kPrefix)) return -1;
  name.remove_prefix(kPrefix.size());
  const size_t dot = name.find('.');
  int layer = -1;
  if (dot == std::string_view::npos || !absl::SimpleAtoi(absl::string_view(name.data(), dot), &layer)) return -1;
  return layer;
}

// llama.cpp's choice of the layers that get more bits: the first and last eighth of the layers and
// every third one in between (integer division throughout).
bool MoreBits(int layer, int layers) {
  return layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
}

bool EndsWithPart(std::string_view name, std::string_view part) {
  return name.ends_with(std::string(part) + ".weight");
}

// An expert's down projection: "...experts.E.down_proj.weight" (Qwen3-MoE),
// "...block_sparse_moe.experts.E.w2.weight" (Mixtral) or every expert's stacked in
// "...mlp.experts.down_proj" (GPT-OSS), which llama.cpp treats as ffn_down.
bool IsExpertDown(std::string_view name) {
  return name.find(".experts.") != std::string_view::npos &&
         (EndsWithPart(name, "down_proj") || EndsWithPart(name, "w2") || name.ends_with(".experts.down_proj"));
}

}  // namespace

struct SchemeName {
  QuantScheme scheme;
  const char* name;
  int file_type;  // llama.cpp's general.file_type
};
constexpr SchemeName kSchemes[] = {
    {QuantScheme::kF32, "f32", 0},       {QuantScheme::kF16, "f16", 1},       {QuantScheme::kQ8_0, "q8_0", 7},     {QuantScheme::kQ4_K_M, "q4_k_m", 15},
    {QuantScheme::kQ5_K_M, "q5_k_m", 17}, {QuantScheme::kQ6_K, "q6_k", 18},    {QuantScheme::kQ4_0, "q4_0", 2},
    {QuantScheme::kIQ4_XS, "iq4_xs", 30},
};

absl::StatusOr<QuantScheme> ParseQuantScheme(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(absl::string_view(name.data(), name.size()));
  std::string known;
  for (const SchemeName& s : kSchemes) {
    if (lower == s.name) return s.scheme;
    absl::StrAppend(&known, known.empty() ? "" : ", ", s.name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown quantization '", absl::string_view(name.data(), name.size()), "' (", known, ")"));
}

const char* QuantSchemeName(QuantScheme scheme) {
  for (const SchemeName& s : kSchemes) {
    if (s.scheme == scheme) return s.name;
  }
  return "none";
}

int GgufFileType(QuantScheme scheme) {
  for (const SchemeName& s : kSchemes) {
    if (s.scheme == scheme) return s.file_type;
  }
  return 1;
}

// As llama.cpp's llama-quantize applies them without an importance matrix:
//   - the LM head (lm_head, or the embedding when it is tied to the head): Q6_K (Q8_0 for q8_0);
//   - Q4_K_M and Q5_K_M: attention v_proj and MLP down_proj (an expert's too: ffn_down_exps) of
//     layer i of n: Q6_K when i < n/8, i >= 7n/8 or (i - n/8) % 3 == 2 (for the 2-layer fixture
//     llama_q: layer 1's); a fused qkv_proj (Phi-3): Q5_K; every other matrix, the embedding and the
//     experts' gate and up included, Q4_K (Q5_K for Q5_K_M);
//   - q4_0, iq4_xs, q6_k, q8_0: every other matrix in that type;
//   - a model of exactly 8 experts a layer (llama.cpp's rule for Mixtral 8x7B): attention k_proj and
//     v_proj Q8_0 under every scheme, and o_proj Q5_K under Q4_K_M and IQ4_XS.
// A matrix whose rows are not whole 256-value blocks gets llama.cpp's substitute if they are whole
// 32-value blocks: Q5_0 for Q4_K, Q5_1 for Q5_K, Q8_0 for Q6_K, IQ4_NL for IQ4_XS; else `fallback`.
// (Gemma 3's rows of 1,152 values: Q5_0 and Q8_0.)
DType QuantizedDType(QuantScheme scheme, std::string_view hf_name, int64_t cols, int num_layers, bool tied,
                     int64_t experts, DType fallback) {
  auto fits = [&](DType t) { return cols > 0 && cols % graph::Info(t).block_elems == 0; };
  auto or_fallback = [&](DType t) {
    if (fits(t)) return t;
    const DType substitute = t == DType::kQ4_K    ? DType::kQ5_0
                             : t == DType::kQ5_K  ? DType::kQ5_1
                             : t == DType::kIQ4_XS ? DType::kIQ4_NL
                                                   : DType::kQ8_0;
    return fits(substitute) ? substitute : fallback;
  };
  // A mixture of experts' router stays f32, as the model graph declares it (llama.cpp does not
  // quantize ffn_gate_inp either).
  if (EndsWithPart(hf_name, "mlp.gate") || EndsWithPart(hf_name, "block_sparse_moe.gate") ||
      EndsWithPart(hf_name, "mlp.router")) {
    return DType::kF32;
  }
  const bool head = hf_name == "lm_head.weight" || (tied && EndsWithPart(hf_name, "embed_tokens"));
  const bool eight_experts = experts == 8;
  if (scheme == QuantScheme::kNone) return fallback;
  if (scheme == QuantScheme::kF32) return DType::kF32;
  if (scheme == QuantScheme::kF16) return DType::kF16;
  if (eight_experts && (EndsWithPart(hf_name, "self_attn.k_proj") || EndsWithPart(hf_name, "self_attn.v_proj"))) {
    return or_fallback(DType::kQ8_0);
  }
  const bool eight_experts_o = eight_experts && EndsWithPart(hf_name, "self_attn.o_proj");
  DType base = DType::kQ4_K;
  switch (scheme) {
    case QuantScheme::kQ8_0: return or_fallback(DType::kQ8_0);
    case QuantScheme::kQ6_K: return or_fallback(DType::kQ6_K);
    case QuantScheme::kQ4_0: return or_fallback(head ? DType::kQ6_K : DType::kQ4_0);
    case QuantScheme::kIQ4_XS: return or_fallback(head ? DType::kQ6_K : eight_experts_o ? DType::kQ5_K : DType::kIQ4_XS);
    case QuantScheme::kQ4_K_M: break;
    case QuantScheme::kQ5_K_M: base = DType::kQ5_K; break;
    default: return fallback;  // (the float schemes, above)
  }
  if (head) return or_fallback(DType::kQ6_K);
  if (eight_experts_o && scheme == QuantScheme::kQ4_K_M) return or_fallback(DType::kQ5_K);
  const int layer = LayerOf(hf_name);
  if (layer >= 0 && (EndsWithPart(hf_name, "self_attn.v_proj") || EndsWithPart(hf_name, "mlp.down_proj") ||
                     IsExpertDown(hf_name)) &&
      MoreBits(layer, num_layers)) {
    return or_fallback(DType::kQ6_K);
  }
  if (EndsWithPart(hf_name, "qkv_proj")) return or_fallback(DType::kQ5_K);
  return or_fallback(base);
}

}  // namespace doppler::quant
