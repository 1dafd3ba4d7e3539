// Element types of tensors, including llama.cpp's block-quantized formats.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace doppler::graph {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kI32,
  // Block formats: a row of K values is K / block_elems blocks of block_bytes each.
  kQ8_0,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ5_0,
  kQ4_0,
  kQ4_1,
  kQ5_1,
  kQ2_K,
  kQ3_K,
  kIQ4_NL,
  kIQ4_XS,
  kMXFP4,  // OCP microscaling FP4 (GPT-OSS's experts): an E8M0 scale byte, then 32 E2M1 values
};

struct DTypeInfo {
  const char* name;
  int block_elems;  // values per block (1 for plain types)
  int block_bytes;  // bytes per block
};

const DTypeInfo& Info(DType t);
inline const char* Name(DType t) { return Info(t).name; }
inline bool IsBlockFormat(DType t) { return Info(t).block_elems > 1; }
inline bool IsFloat(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }
std::optional<DType> ParseDType(std::string_view name);  // accepts "f32", "F32", "q4_k", "Q4_K"...

// The 16 values IQ4_NL's and IQ4_XS's 4-bit quants index (ggml's kvalues_iq4nl): a non-linear grid,
// denser near zero, that each block scales by its d.
inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
// MXFP4's E2M1 codes (sign bit 3; magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6) doubled to integers (ggml's
// kvalues_mxfp4); a block's value is code value * 2^(e - 128) for its E8M0 scale byte e.
inline constexpr int8_t kMXFP4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Bytes taken by n values (n must be a multiple of the block size for block formats).
size_t ByteSize(DType t, int64_t n);

}  // namespace doppler::graph
