// Block decoders. Each computes in float32 in exactly ggml's order (the scale product first,
// then the multiply by the quant, then the min subtraction) so results match bit for bit.
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "graph/half.h"
#include "quant/k_scales.h"
#include "quant/quant.h"

namespace doppler::quant {
namespace {

using graph::DType;
using graph::HalfToFloat;
using internal::UnpackScaleMin;

uint16_t U16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// f16 d, int8 q[32].
void DecodeQ8_0(const uint8_t* b, float* y) {
  const float d = HalfToFloat(U16(b));
  for (int i = 0; i < 32; ++i) y[i] = d * static_cast<float>(static_cast<int8_t>(b[2 + i]));
}

// f16 d, f16 dmin, scales[12], then (Q5_K only) qh[32], then qs[128]. Values 64c..64c+31 are
// the low nibbles of qs[32c..], values 64c+32.. the high nibbles; Q5_K adds bit 2c (resp.
// 2c+1) of qh[l] as the fifth bit.
void DecodeQ4KorQ5K(const uint8_t* b, bool five_bits, float* y) {
  const float d = HalfToFloat(U16(b));
  const float dmin = HalfToFloat(U16(b + 2));
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = five_bits ? b + 48 : b + 16;
  for (int c = 0; c < 4; ++c) {
    for (int half = 0; half < 2; ++half) {
      const int j = 2 * c + half;  // sub-block
      int sc, m;
      UnpackScaleMin(scales, j, &sc, &m);
      const float dl = d * static_cast<float>(sc);
      const float ml = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) {
        int q = half == 0 ? (qs[32 * c + l] & 0xF) : (qs[32 * c + l] >> 4);
        if (five_bits && ((qh[l] >> j) & 1)) q += 16;
        y[32 * j + l] = dl * static_cast<float>(q) - ml;
      }
    }
  }
}

// ql[128], qh[64], int8 scales[16], f16 d. In half n, for l < 32: ql[64n + l] holds values
// l (low nibble) and l+64 (high), ql[64n + 32 + l] values l+32 and l+96; qh[32n + l] holds
// the top two bits of l, l+32, l+64, l+96 in bit pairs 0, 2, 4, 6. Quants are offset by 32.
void DecodeQ6K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = HalfToFloat(U16(b + 208));
  for (int n = 0; n < 2; ++n) {
    const uint8_t* l4 = ql + 64 * n;
    const uint8_t* h2 = qh + 32 * n;
    for (int l = 0; l < 32; ++l) {
      const int q[4] = {(l4[l] & 0xF) | ((h2[l] & 3) << 4), (l4[l + 32] & 0xF) | (((h2[l] >> 2) & 3) << 4),
                        (l4[l] >> 4) | (((h2[l] >> 4) & 3) << 4), (l4[l + 32] >> 4) | (((h2[l] >> 6) & 3) << 4)};
      for (int k = 0; k < 4; ++k) {
        const int i = 128 * n + 32 * k + l;
        y[i] = (d * static_cast<float>(scales[i / 16])) * static_cast<float>(q[k] - 32);
      }
    }
  }
}

// f16 d, qh[4] (a little-endian word: bit j is the fifth bit of value j), qs[16]: value j < 16 is
// the low nibble of qs[j], value j + 16 its high nibble; quants are offset by 16.
void DecodeQ5_0(const uint8_t* b, float* y) {
  const float d = HalfToFloat(U16(b));
  const uint32_t qh = static_cast<uint32_t>(b[2]) | (static_cast<uint32_t>(b[3]) << 8) |
                      (static_cast<uint32_t>(b[4]) << 16) | (static_cast<uint32_t>(b[5]) << 24);
  for (int j = 0; j < 16; ++j) {
    const int lo = (b[6 + j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (b[6 + j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = static_cast<float>(lo - 16) * d;
    y[j + 16] = static_cast<float>(hi - 16) * d;
  }
}

// f16 d, qs[16] (Q4_0, and IQ4_NL whose nibbles index kIQ4NLValues): value j < 16 is the low nibble
// of qs[j], value j + 16 its high nibble; Q4_0's quants are offset by 8.
void DecodeQ4_0(const uint8_t* b, float* y) {
  const float d = HalfToFloat(U16(b));
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((b[2 + j] & 0xF) - 8) * d;
    y[j + 16] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
  }
}
void DecodeIQ4_NL(const uint8_t* b, float* y) {
  const float d = HalfToFloat(U16(b));
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(graph::kIQ4NLValues[b[2 + j] & 0xF]);
    y[j + 16] = d * static_cast<float>(graph::kIQ4NLValues[b[2 + j] >> 4]);
  }
}

// f16 d, f16 m, (Q5_1: qh[4], a word whose bit j is the fifth bit of value j,) qs[16]: nibbles as
// Q4_0's, unsigned; q·d + m.
void DecodeQ4_1orQ5_1(const uint8_t* b, bool five_bits, float* y) {
  const float d = HalfToFloat(U16(b));
  const float m = HalfToFloat(U16(b + 2));
  const uint32_t qh = five_bits ? static_cast<uint32_t>(b[4]) | (static_cast<uint32_t>(b[5]) << 8) |
                                      (static_cast<uint32_t>(b[6]) << 16) | (static_cast<uint32_t>(b[7]) << 24)
                                : 0u;
  const uint8_t* qs = b + (five_bits ? 8 : 4);
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = static_cast<float>(lo) * d + m;
    y[j + 16] = static_cast<float>(hi) * d + m;
  }
}

// scales[16] (a 4-bit scale low, a 4-bit min high, per 16 values), qs[64], f16 d, f16 dmin. In half
// n, quarter j, value 128n + 32j + l is bits 2j, 2j + 1 of qs[32n + l], under scale byte 8n + 2j +
// l / 16: (d·sc)·q − dmin·m.
void DecodeQ2K(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = HalfToFloat(U16(b + 80));
  const float dmin = HalfToFloat(U16(b + 82));
  for (int n = 0; n < 2; ++n) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t sc = scales[8 * n + 2 * j + l / 16];
        const float dl = d * static_cast<float>(sc & 0xF);
        const float ml = dmin * static_cast<float>(sc >> 4);
        y[128 * n + 32 * j + l] = dl * static_cast<float>((qs[32 * n + l] >> (2 * j)) & 3) - ml;
      }
    }
  }
}

// hmask[32], qs[64], scales[12], f16 d. Value 128n + 32j + l has its low two bits as Q2_K's and its
// third bit as bit 4n + j of hmask[l]: q = low − (bit ? 0 : 4). Its 6-bit scale s (index 8n + 2j +
// l / 16, offset by 32) keeps its low 4 bits in the nibbles of bytes 0-7 (s < 8 low nibbles, s >= 8
// high) and its top 2 bits in bits 2(s / 4) of byte 8 + s % 4: (d·(s − 32))·q.
void DecodeQ3K(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* scales = b + 96;
  const float d = HalfToFloat(U16(b + 108));
  for (int n = 0; n < 2; ++n) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        const int s = 8 * n + 2 * j + l / 16;
        const int low = s < 8 ? scales[s] & 0xF : scales[s - 8] >> 4;
        const int sc = (low | (((scales[8 + s % 4] >> (2 * (s / 4))) & 3) << 4)) - 32;
        const int q = ((qs[32 * n + l] >> (2 * j)) & 3) - (((hmask[l] >> (4 * n + j)) & 1) ? 0 : 4);
        y[128 * n + 32 * j + l] = (d * static_cast<float>(sc)) * static_cast<float>(q);
      }
    }
  }
}

// f16 d, u16 scales_h, scales_l[4], qs[128]: sub-block s (32 values) has the 6-bit scale (nibble s % 2
// of scales_l[s / 2]) | (bits 2s, 2s + 1 of scales_h) << 4, offset by 32, and its values as IQ4_NL's
// block at qs[16s]: (d·(ls − 32))·kIQ4NLValues[nibble].
void DecodeIQ4_XS(const uint8_t* b, float* y) {
  const float d = HalfToFloat(U16(b));
  const uint16_t scales_h = U16(b + 2);
  for (int s = 0; s < 8; ++s) {
    const int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 0xF) | (((scales_h >> (2 * s)) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    const uint8_t* qs = b + 8 + 16 * s;
    for (int j = 0; j < 16; ++j) {
      y[32 * s + j] = dl * static_cast<float>(graph::kIQ4NLValues[qs[j] & 0xF]);
      y[32 * s + j + 16] = dl * static_cast<float>(graph::kIQ4NLValues[qs[j] >> 4]);
    }
  }
}

// e (E8M0), qs[16]: value j < 16 is the E2M1 code in the low nibble of qs[j], value j + 16 the
// high nibble's; a code is sign (bit 3) and magnitude 0, 0.5, 1, 1.5, 2, 3, 4, 6, here doubled to
// integers with the scale halved: value = kMXFP4Values[code] * 2^(e - 128), exact in float32 (ggml's
// E8M0-to-half-float scale, subnormal for e < 2).
void DecodeMXFP4(const uint8_t* b, float* y) {
  const int exponent = static_cast<int>(b[0]) - 128;
  for (int j = 0; j < 16; ++j) {
    y[j] = std::ldexp(static_cast<float>(graph::kMXFP4Values[b[1 + j] & 0xF]), exponent);
    y[j + 16] = std::ldexp(static_cast<float>(graph::kMXFP4Values[b[1 + j] >> 4]), exponent);
  }
}

}  // namespace

absl::Status DequantizeRow(DType dtype, const uint8_t* blocks, int64_t n, float* out) {
  const graph::DTypeInfo& info = graph::Info(dtype);
  if (n < 0 || n % info.block_elems != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot dequantize ", n, " values of ", info.name, ": not a multiple of its block of ",
                     info.block_elems));
  }
  const int64_t nblocks = n / info.block_elems;
  for (int64_t i = 0; i < nblocks; ++i) {
    const uint8_t* b = blocks + i * info.block_bytes;
    float* y = out + i * info.block_elems;
    switch (dtype) {
      case DType::kF32: std::memcpy(y, b, 4); break;
      case DType::kF16: *y = HalfToFloat(U16(b)); break;
      case DType::kBF16: *y = graph::BF16ToFloat(U16(b)); break;
      case DType::kQ8_0: DecodeQ8_0(b, y); break;
      case DType::kQ4_K: DecodeQ4KorQ5K(b, false, y); break;
      case DType::kQ5_K: DecodeQ4KorQ5K(b, true, y); break;
      case DType::kQ6_K: DecodeQ6K(b, y); break;
      case DType::kQ5_0: DecodeQ5_0(b, y); break;
      case DType::kQ4_0: DecodeQ4_0(b, y); break;
      case DType::kQ4_1: DecodeQ4_1orQ5_1(b, false, y); break;
      case DType::kQ5_1: DecodeQ4_1orQ5_1(b, true, y); break;
      case DType::kQ2_K: DecodeQ2K(b, y); break;
      case DType::kQ3_K: DecodeQ3K(b, y); break;
      case DType::kIQ4_NL: DecodeIQ4_NL(b, y); break;
      case DType::kIQ4_XS: DecodeIQ4_XS(b, y); break;
      case DType::kMXFP4: DecodeMXFP4(b, y); break;
      default:
        return absl::InvalidArgumentError(absl::StrCat("cannot dequantize ", info.name, ": not a float or block format"));
    }
  }
  return absl::OkStatus();
}

}  // namespace doppler::quant
