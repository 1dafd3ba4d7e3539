// Which storage type each weight gets when a float checkpoint is quantized: at load
// (`doppler run --quant`) and when writing a GGUF (`doppler convert --quant`). Both use the same
// rule, so a model quantized at load computes exactly like its converted GGUF.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "graph/dtype.h"

namespace doppler::quant {

enum class QuantScheme {
  kNone,   // keep the float type asked for (--dtype)
  kF32,    // every matrix f32 (convert's --quant f32)
  kF16,    // every matrix f16 (convert's --quant f16)
  kQ8_0,   // every matrix Q8_0
  kQ4_K_M,  // llama.cpp's Q4_K_M mix of Q4_K and Q6_K, Q5_0 and Q8_0 (see QuantizedDType)
  kQ5_K_M,  // llama.cpp's Q5_K_M: Q4_K_M's mix with Q5_K (Q5_1 where rows are no whole 256-value blocks)
  kQ6_K,    // every matrix Q6_K
  kQ4_0,    // every matrix Q4_0, the LM head Q6_K
  kIQ4_XS,  // every matrix IQ4_XS (IQ4_NL where rows are no whole 256-value blocks), the LM head Q6_K
};

// "f32", "f16", "q8_0", "q4_k_m", "q5_k_m", "q6_k", "q4_0", "iq4_xs" (any case); anything else is an
// error listing these.
absl::StatusOr<QuantScheme> ParseQuantScheme(std::string_view name);
const char* QuantSchemeName(QuantScheme scheme);

// llama.cpp's general.file_type for a scheme (ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q4_0 2, MOSTLY_Q8_0 7,
// MOSTLY_Q4_K_M 15, MOSTLY_Q5_K_M 17, MOSTLY_Q6_K 18, MOSTLY_IQ4_XS 30).
int GgufFileType(QuantScheme scheme);

// The storage type of the 2-D weight `hf_name` (transformers' name, e.g.
// "model.layers.3.mlp.down_proj.weight", or an expert's "...mlp.experts.5.down_proj.weight") with
// rows of `cols` values, in a model of `num_layers` layers whose embedding is (`tied`) or is not
// also the LM head, with `experts` experts a mixture-of-experts layer (0: dense). `fallback` is the
// float type for kNone and for matrices a block format cannot hold. 1-D tensors (norms, biases)
// are not asked about: they stay f32, as does a mixture of experts' router (mlp.gate,
// block_sparse_moe.gate, mlp.router) under every scheme. Every expert of a layer gets the same type
// (a GGUF stacks them into one tensor).
graph::DType QuantizedDType(QuantScheme scheme, std::string_view hf_name, int64_t cols, int num_layers, bool tied,
                            int64_t experts, graph::DType fallback);

}  // namespace doppler::quant
