// CPU reference of llama.cpp's block formats (Q8_0, Q5_0, Q4_K, Q5_K, Q6_K; decoding also Q4_0,
// Q4_1, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS and MXFP4), bit-exact with ggml:
// dequantization in float32 in ggml's operation order, and ggml's reference quantizers (no
// importance matrix), so GGUF weights can be checked, converted and produced on the CPU.
// F32/F16/BF16 are accepted too, so callers need not special-case plain floats.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/dtype.h"

namespace doppler::quant {

// Decodes n values stored as `dtype` (n a multiple of its block size; blocks consecutive)
// into out[0..n). Errors: an integer dtype, a negative n, or n not a multiple of the block.
absl::Status DequantizeRow(graph::DType dtype, const uint8_t* blocks, int64_t n, float* out);

// Quantizes a row-major [rows, cols] float matrix row by row: the result is `rows` rows of
// ByteSize(dtype, cols) bytes each. Supports Q8_0, Q5_0, Q4_K, Q5_K, Q6_K and F32/F16/BF16.
// Errors: other dtypes, negative sizes, or cols not a multiple of the block size.
absl::StatusOr<std::vector<uint8_t>> QuantizeRows(graph::DType dtype, const float* x, int64_t rows, int64_t cols);

}  // namespace doppler::quant
