// GPT-OSS's experts as llama.cpp's converter writes them (gpt-oss): transformers stores each
// layer's experts stacked, gate and up interleaved (mlp.experts.gate_up_proj, gate = even columns
// or rows, up = odd), down_proj beside it, and their biases; llama.cpp wants ffn_gate_exps and
// ffn_up_exps apart, every matrix [out, in].
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/hf_config.h"
#include "formats/weight_store.h"
#include "graph/dtype.h"
#include "models/blocks.h"
#include "quant/quant_scheme.h"

namespace doppler::checkpoints {

// One tensor to write: its GGUF name, type, shape (outermost first) and bytes, made on demand.
struct GgufTensorPlan {
  std::string name;
  graph::DType dtype;
  std::vector<int64_t> shape;
  std::function<absl::StatusOr<std::vector<uint8_t>>()> bytes;
};

// Layer `layer`'s blk.N.ffn_{gate,up,down}_exps.weight and .bias from `store`'s
// model.layers.N.mlp.experts.{gate_up_proj, down_proj}[_bias]:
//   - float experts (stored [E, in, out]) are transposed to [E, out, in] and take `quant`'s type
//     (quant/quant_scheme.h), as the HF directory quantized at load would;
//   - MXFP4 experts (published checkpoints, already [E, out, in] in ggml's blocks) stay MXFP4, their
//     rows split, as llama.cpp's converter keeps them;
//   - biases F32: gate and up [E, I], down [E, hidden].
// A missing or misshapen tensor is an error naming it and the shape the config gives.
absl::StatusOr<std::vector<GgufTensorPlan>> GptOssExpertTensors(std::shared_ptr<const formats::WeightStore> store,
                                                                const formats::ModelConfig& config, const models::MoeSpec& moe,
                                                                quant::QuantScheme quant, int layer);

}  // namespace doppler::checkpoints
