// Float32 values to and from the bytes of a stored dtype: the float types (f32, f16, bf16) both
// ways, and the block formats from their bytes (decoded as quant/quant.h does).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/weight_store.h"
#include "graph/dtype.h"

namespace doppler::quant {

// Encodes float32 values as a float dtype (f32, f16, bf16), rounding to nearest even.
std::vector<uint8_t> EncodeFloats(graph::DType dtype, std::span<const float> values);

// Decodes bytes of a float dtype (f32, f16, bf16) or of consecutive blocks of a block format
// (every type quant/quant.h decodes) to float32.
std::vector<float> DecodeFloats(graph::DType dtype, std::span<const uint8_t> bytes);

// Expands an F32/F16/BF16 or block-format tensor to float32 (row-major). Fails, naming the file
// and tensor, for other dtypes or when nbytes disagrees with the shape.
absl::StatusOr<std::vector<float>> ToFloat32(const formats::TensorView& t);

}  // namespace doppler::quant
