// Turning stored tensors into the bytes a Param node asks for (its dtype and shape), and the
// interpreter's view of the same weights.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/weight_store.h"
#include "graph/graph.h"
#include "graph/interpreter.h"

namespace doppler::checkpoints {

// The tensor named by `param` converted to param's dtype, after checking it exists and has
// param's shape. Errors name the tensor, the file and both shapes. A tensor whose dtype is the
// param's passes through unchanged (block formats included); a float tensor for a block-format
// param is quantized row by row (QuantizeRows: --quant at load); a block-format tensor for a float
// param is dequantized; block -> another block format is an error. A param with attrs `source`, ...
// lies inside the stored tensor `source` (graph/param_slice.h: rows of a fused tensor such as
// Phi-3's qkv_proj, one expert's matrix of a stacked tensor, read transposed where it is stored
// [in, out]), which must have the shape the slice implies.
absl::StatusOr<std::vector<uint8_t>> MaterializeParam(const formats::WeightStore& store, const graph::Node& param);
// The checkpoint tensor a param is read from (the fused tensor for a param with `source`), checked
// to have the shape the param implies; nothing is read. Errors as MaterializeParam's.
absl::StatusOr<formats::TensorView> ParamTensor(const formats::WeightStore& store, const graph::Node& param);

// Weights for the interpreter: exactly the values the GPU sees (stored dtype decoded to f32).
class StoreParamSource : public graph::ParamSource {
 public:
  explicit StoreParamSource(const formats::WeightStore& store) : store_(store) {}
  absl::StatusOr<std::vector<float>> Float32(const graph::Node& param) const override;

 private:
  const formats::WeightStore& store_;
};

}  // namespace doppler::checkpoints
