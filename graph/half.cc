#include "graph/half.h"

#include <cstring>

namespace doppler::graph {
namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return BitsFloat(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return BitsFloat(sign | ((exp + 112) << 23) | (mant << 13));  // 112 = 127 - 15
  // Zero or subnormal: mant * 2^-24, exact in float32 (a float multiply by a power of two).
  const float magnitude = static_cast<float>(mant) * 0x1p-24f;
  return BitsFloat(sign | FloatBits(magnitude));
}

uint16_t FloatToHalf(float f) {
  const uint32_t bits = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t x = bits & 0x7fffffffu;
  if (x > 0x7f800000u) {  // NaN: quiet it and keep the top payload bits
    return sign | 0x7e00u | static_cast<uint16_t>((x >> 13) & 0x3ffu);
  }
  // 65520 (0x477ff000) is halfway between 65504 (odd mantissa) and 2^16: ties go up to inf.
  if (x >= 0x477ff000u) return sign | 0x7c00u;
  if (x >= 0x38800000u) {  // normal f16 (>= 2^-14)
    // Round the 13 dropped mantissa bits to nearest-even; a carry bumps the exponent, as it should.
    const uint32_t rounded = x + 0xfffu + ((x >> 13) & 1u);
    return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);  // rebias 127 -> 15
  }
  // Values <= 2^-25 round to zero (2^-25 itself is a tie between 0 and 2^-24: even is 0).
  if (x <= 0x33000000u) return sign;
  // f16 subnormal: count units of 2^-24. value = m * 2^(e-150), so units = m >> (126 - e).
  const uint32_t e = x >> 23;
  const uint32_t m = (x & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24 here
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;  // may reach 0x400, the smallest normal
  return sign | static_cast<uint16_t>(q);
}

float BF16ToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

uint16_t FloatToBF16(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  // Nearest-even on the low 16 bits; overflow past the largest bf16 carries into inf.
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace doppler::graph
