// ggml's reference quantizers (what llama-quantize uses without an importance matrix), one
// block at a time. The scales stored as f16 are rounded first and the quants are then chosen
// against the rounded values, as ggml does, so decoding reproduces what was searched for.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>

#include "absl/strings/str_cat.h"
#include "graph/half.h"
#include "quant/float_codec.h"
#include "quant/iq4_quant.h"
#include "quant/k_scales.h"
#include "quant/quant.h"
#include "quant/scale_search.h"

namespace doppler::quant {
namespace {

using graph::DType;
using graph::FloatToHalf;
using graph::HalfToFloat;
using internal::AsymmetricScale;
using internal::NearestInt;
using internal::PackScaleMin;
using internal::SymmetricScale;
using internal::UnpackScaleMin;

void PutU16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xff);
  p[1] = static_cast<uint8_t>(v >> 8);
}

// C's roundf (ties away from zero, as ggml's Q8_0 uses), kept within int8 so that NaN or
// infinite inputs cannot make the conversion undefined.
int8_t RoundToInt8(float v) {
  if (!(std::fabs(v) <= 127.0f)) return std::isnan(v) ? 0 : (v > 0 ? 127 : -127);
  return static_cast<int8_t>(std::round(v));
}

// d = max|x| / 127, q = round(x / d).
void QuantizeQ8_0(const float* x, uint8_t* b) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  PutU16(b, FloatToHalf(d));
  for (int i = 0; i < 32; ++i) b[2 + i] = static_cast<uint8_t>(RoundToInt8(x[i] * id));
}

// The value of largest magnitude among x[0..32) (the first, on ties).
float LargestMagnitude(const float* x) {
  float amax = 0, max = 0;
  for (int i = 0; i < 32; ++i) {
    if (amax < std::fabs(x[i])) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return max;
}

// ggml's (int8_t)(v·id + offset) capped at qmax: v·id + offset lies in [0, qmax + 1] for finite v;
// clamped first so that a NaN or an overflow cannot make the conversion undefined.
int TruncatedQuant(float v, float id, float offset, int qmax) {
  const float t = v * id + offset;
  return std::min(qmax, t >= 0.0f && t < 128.0f ? static_cast<int>(t) : 0);
}

// Q4_0: d = -m / 8 for the value m of largest magnitude (so m itself becomes quant 0), q = x / d + 8
// truncated toward zero after adding 0.5, at most 15.
void QuantizeQ4_0(const float* x, uint8_t* b) {
  const float d = LargestMagnitude(x) / -8;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  PutU16(b, FloatToHalf(d));
  for (int j = 0; j < 16; ++j) {
    b[2 + j] = static_cast<uint8_t>(TruncatedQuant(x[j], id, 8.5f, 15) | (TruncatedQuant(x[j + 16], id, 8.5f, 15) << 4));
  }
}

// d = -m / 16 for the value m of largest magnitude (so m itself becomes quant 0), q = x / d + 16
// truncated toward zero after adding 0.5 (ggml's (int8_t)(x·id + 16.5)), at most 31.
void QuantizeQ5_0(const float* x, uint8_t* b) {
  const float d = LargestMagnitude(x) / -16;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  PutU16(b, FloatToHalf(d));
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const int lo = TruncatedQuant(x[j], id, 16.5f, 31), hi = TruncatedQuant(x[j + 16], id, 16.5f, 31);
    b[6 + j] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
    qh |= static_cast<uint32_t>((lo >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((hi >> 4) & 1) << (j + 16);
  }
  for (int i = 0; i < 4; ++i) b[2 + i] = static_cast<uint8_t>(qh >> (8 * i));
}

// Q4_1 and Q5_1: m = min x, d = (max x − m) / (2^bits − 1), q = (x − m) / d truncated after adding
// 0.5 (ggml caps Q4_1's at 15, not Q5_1's, whose largest is 31 anyway).
void QuantizeQ4_1orQ5_1(const float* x, bool five_bits, uint8_t* b) {
  float min = x[0], max = x[0];
  for (int i = 1; i < 32; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
  }
  const int qmax = five_bits ? 31 : 15;
  const float d = (max - min) / static_cast<float>(qmax);
  const float id = d != 0 ? 1.0f / d : 0.0f;
  PutU16(b, FloatToHalf(d));
  PutU16(b + 2, FloatToHalf(min));
  uint8_t* qs = b + (five_bits ? 8 : 4);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const int lo = TruncatedQuant(x[j] - min, id, 0.5f, qmax), hi = TruncatedQuant(x[j + 16] - min, id, 0.5f, qmax);
    qs[j] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
    qh |= static_cast<uint32_t>((lo >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((hi >> 4) & 1) << (j + 16);
  }
  if (five_bits) {
    for (int i = 0; i < 4; ++i) b[4 + i] = static_cast<uint8_t>(qh >> (8 * i));
  }
}

// Q4_K (nmax 15) and Q5_K (nmax 31): per 32-value sub-block an asymmetric scale/min search
// weighted by |x| plus the sub-block's RMS, then the 8 scales and 8 mins quantized to 6 bits
// against the largest of each (which become the f16 super-scales d and dmin).
void QuantizeQ4KorQ5K(const float* x, bool five_bits, uint8_t* b) {
  const int nmax = five_bits ? 31 : 15;
  uint8_t L[256], aux[32];
  float weights[32], scales[8], mins[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xj = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xj[l] * xj[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xj[l]);
    scales[j] = five_bits ? AsymmetricScale(32, nmax, xj, weights, L + 32 * j, &mins[j], aux, -0.5f, 0.1f, 15)
                          : AsymmetricScale(32, nmax, xj, weights, L + 32 * j, &mins[j], aux, -1.0f, 0.1f, 20);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t* packed = b + 4;
  std::memset(packed, 0, 12);
  // ggml keeps these in uint8_t before capping at 63, so a (rare) negative scale wraps and is
  // capped too; doing the same keeps the bytes identical.
  for (int j = 0; j < 8; ++j) {
    PackScaleMin(packed, j, std::min(63, NearestInt(inv_scale * scales[j]) & 0xFF),
                 std::min(63, NearestInt(inv_min * mins[j]) & 0xFF));
  }
  PutU16(b, FloatToHalf(max_scale / 63.0f));
  PutU16(b + 2, FloatToHalf(max_min / 63.0f));
  const float d = HalfToFloat(FloatToHalf(max_scale / 63.0f));
  const float dmin = HalfToFloat(FloatToHalf(max_min / 63.0f));
  // Requantize against the stored scales; a sub-block whose scale rounded to 0 keeps the quants
  // of its search (they decode to -dmin*m whatever they are).
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    UnpackScaleMin(packed, j, &sc, &m);
    const float dl = d * static_cast<float>(sc);
    if (dl == 0) continue;
    const float ml = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      L[32 * j + l] = static_cast<uint8_t>(std::clamp(NearestInt((x[32 * j + l] + ml) / dl), 0, nmax));
    }
  }
  uint8_t* qh = b + 16;
  uint8_t* qs = five_bits ? b + 48 : b + 16;
  if (five_bits) std::memset(qh, 0, 32);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
      qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      if (five_bits) qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
    }
  }
}

// Q6_K: per 16-value sub-block a symmetric scale search, then the 16 scales quantized to int8
// against the one of largest magnitude, which maps to -128 (its sign is kept in d).
void QuantizeQ6K(const float* x, uint8_t* b) {
  uint8_t L[256];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int s = 0; s < 16; ++s) {
    scales[s] = SymmetricScale(16, 32, x + 16 * s, L + 16 * s);
    if (std::fabs(scales[s]) > max_abs_scale) {
      max_abs_scale = std::fabs(scales[s]);
      max_scale = scales[s];
    }
  }
  std::memset(b, 0, 210);
  if (max_abs_scale < 1e-15f) return;  // an all-zero block: d = 0, every field 0
  const float iscale = -128.0f / max_scale;
  PutU16(b + 208, FloatToHalf(1 / iscale));
  int8_t* qscales = reinterpret_cast<int8_t*>(b + 192);
  for (int s = 0; s < 16; ++s) qscales[s] = static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[s])));
  const float d = HalfToFloat(FloatToHalf(1 / iscale));
  for (int s = 0; s < 16; ++s) {
    const float ds = d * static_cast<float>(qscales[s]);
    if (ds == 0) continue;  // keeps the search's quants, which decode to 0 anyway
    for (int i = 0; i < 16; ++i) L[16 * s + i] = static_cast<uint8_t>(32 + std::clamp(NearestInt(x[16 * s + i] / ds), -32, 31));
  }
  // Layout as in DecodeQ6K: per half of 128 values, low nibbles in ql, top bit pairs in qh.
  for (int n = 0; n < 2; ++n) {
    uint8_t* ql = b + 64 * n;
    uint8_t* qh = b + 128 + 32 * n;
    const uint8_t* q = L + 128 * n;
    for (int l = 0; l < 32; ++l) {
      ql[l] = static_cast<uint8_t>((q[l] & 0xF) | ((q[l + 64] & 0xF) << 4));
      ql[l + 32] = static_cast<uint8_t>((q[l + 32] & 0xF) | ((q[l + 96] & 0xF) << 4));
      qh[l] = static_cast<uint8_t>((q[l] >> 4) | ((q[l + 32] >> 4) << 2) | ((q[l + 64] >> 4) << 4) | ((q[l + 96] >> 4) << 6));
    }
  }
}

}  // namespace

absl::StatusOr<std::vector<uint8_t>> QuantizeRows(DType dtype, const float* x, int64_t rows, int64_t cols) {
  const graph::DTypeInfo& info = graph::Info(dtype);
  if (rows < 0 || cols < 0 || cols % info.block_elems != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot quantize ", rows, " x ", cols, " values to ", info.name,
                                                   ": rows of a multiple of ", info.block_elems, " values needed"));
  }
  if (cols != 0 && rows > INT64_MAX / cols) return absl::InvalidArgumentError("cannot quantize: too many values");
  const int64_t n = rows * cols;
  if (graph::IsFloat(dtype)) return EncodeFloats(dtype, std::span<const float>(x, static_cast<size_t>(n)));
  void (*block_fn)(const float*, uint8_t*) = nullptr;
  switch (dtype) {
    case DType::kQ8_0: block_fn = QuantizeQ8_0; break;
    case DType::kQ4_K: block_fn = [](const float* v, uint8_t* b) { QuantizeQ4KorQ5K(v, false, b); }; break;
    case DType::kQ5_K: block_fn = [](const float* v, uint8_t* b) { QuantizeQ4KorQ5K(v, true, b); }; break;
    case DType::kQ6_K: block_fn = QuantizeQ6K; break;
    case DType::kQ5_0: block_fn = QuantizeQ5_0; break;
    case DType::kQ4_0: block_fn = QuantizeQ4_0; break;
    case DType::kQ4_1: block_fn = [](const float* v, uint8_t* b) { QuantizeQ4_1orQ5_1(v, false, b); }; break;
    case DType::kQ5_1: block_fn = [](const float* v, uint8_t* b) { QuantizeQ4_1orQ5_1(v, true, b); }; break;
    case DType::kIQ4_NL: block_fn = internal::QuantizeIQ4_NL; break;
    case DType::kIQ4_XS: block_fn = internal::QuantizeIQ4_XS; break;
    default: return absl::InvalidArgumentError(absl::StrCat("cannot quantize to ", info.name));
  }
  // Blocks of consecutive rows are consecutive, so the matrix is one long row of blocks.
  std::vector<uint8_t> out(graph::ByteSize(dtype, n));
  for (int64_t i = 0; i < n / info.block_elems; ++i) block_fn(x + i * info.block_elems, out.data() + i * info.block_bytes);
  return out;
}

}  // namespace doppler::quant
