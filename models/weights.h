// Turning stored tensors into the bytes a Param node asks for (its dtype and shape), and the
// interpreter's view of the same weights.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "graph/interpreter.h"
#include "models/weight_store.h"

namespace doppler::models {

// The tensor named by `param` converted to param's dtype, after checking it exists and has
// param's shape. Errors name the tensor, the file and both shapes. A tensor whose dtype is the
// param's passes through unchanged (block formats included); a float tensor for a block-format
// param is quantized row by row (QuantizeRows: --quant at load); a block-format tensor for a float
// param is dequantized; block -> another block format is an error. A param with attrs `source`, ...
// lies inside the stored tensor `source` (graph/param_slice.h: rows of a fused tensor such as
// Phi-3's qkv_proj, one expert's matrix of a stacked tensor, read transposed where it is stored
// [in, out]), which must have the shape the slice implies.
absl::StatusOr<std::vector<uint8_t>> MaterializeParam(const WeightStore& store, const graph::Node& param);
// The checkpoint tensor a param is read from (the fused tensor for a param with `source`), checked
// to have the shape the param implies; nothing is read. Errors as MaterializeParam's.
absl::StatusOr<TensorView> ParamTensor(const WeightStore& store, const graph::Node& param);

// Encodes float32 values as a float dtype (f32, f16, bf16), rounding to nearest even.
std::vector<uint8_t> EncodeFloats(graph::DType dtype, std::span<const float> values);

// Decodes bytes of a float dtype (f32, f16, bf16) or of consecutive blocks of a block format
// (Q8_0, Q5_0, Q4_K, Q5_K, Q6_K; dequantized as models/quant does) to float32.
std::vector<float> DecodeFloats(graph::DType dtype, std::span<const uint8_t> bytes);

// Expands an F32/F16/BF16 or block-format tensor to float32 (row-major). Fails, naming the file
// and tensor, for other dtypes or when nbytes disagrees with the shape.
absl::StatusOr<std::vector<float>> ToFloat32(const TensorView& t);

// Weights for the interpreter: exactly the values the GPU sees (stored dtype decoded to f32).
class StoreParamSource : public graph::ParamSource {
 public:
  explicit StoreParamSource(const WeightStore& store) : store_(store) {}
  absl::StatusOr<std::vector<float>> Float32(const graph::Node& param) const override;

 private:
  const WeightStore& store_;
};

}  // namespace doppler::models
