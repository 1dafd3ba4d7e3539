// Tests of the f16 / bf16 conversions, with the compiler's _Float16 as an independent oracle
// where it exists.
#include "graph/half.h"

#include <cmath>
#include <cstring>
#include <random>

#include "gtest/gtest.h"

namespace doppler::graph {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool HalfIsNan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

TEST(Half, AllPatternsRoundTrip) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float f = HalfToFloat(h);
    if (HalfIsNan(h)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << i;
      EXPECT_TRUE(HalfIsNan(FloatToHalf(f))) << std::hex << i;
      EXPECT_EQ(FloatToHalf(f) & 0x8000, h & 0x8000) << std::hex << i;
      continue;
    }
    EXPECT_EQ(FloatToHalf(f), h) << std::hex << i;
  }
}

TEST(Half, DecodesKnownValues) {
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0400), 0x1p-14f);        // smallest normal
  EXPECT_EQ(HalfToFloat(0x0001), 0x1p-24f);        // smallest subnormal
  EXPECT_EQ(HalfToFloat(0x03ff), 1023 * 0x1p-24f);  // largest subnormal
  EXPECT_EQ(HalfToFloat(0x7c00), INFINITY);
  EXPECT_EQ(HalfToFloat(0xfc00), -INFINITY);
  EXPECT_EQ(Bits(HalfToFloat(0x8000)), 0x80000000u);  // -0 keeps its sign
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
}

TEST(Half, RoundsToNearestEven) {
  // Halfway between 1 and the next half (1 + 2^-10): ties go to the even mantissa.
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f), 0x3c00);        // tie -> 1.0 (even)
  EXPECT_EQ(FloatToHalf(1.0f + 3 * 0x1p-11f), 0x3c02);    // tie -> 1 + 2^-9 (even)
  EXPECT_EQ(FloatToHalf(std::nextafter(1.0f + 0x1p-11f, 2.0f)), 0x3c01);  // just above the tie
  EXPECT_EQ(FloatToHalf(std::nextafter(1.0f + 3 * 0x1p-11f, 0.0f)), 0x3c01);
  // Mantissa carry into the exponent: just below 2 rounds up to exactly 2.
  EXPECT_EQ(FloatToHalf(2.0f - 0x1p-12f), 0x4000);
  // Overflow: 65520 is the tie between 65504 and 2^16, and rounds to inf.
  EXPECT_EQ(FloatToHalf(65519.996f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-1e10f), 0xfc00);
  EXPECT_EQ(FloatToHalf(INFINITY), 0x7c00);
  // Subnormals: units of 2^-24, ties to even.
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);                 // tie -> 0
  EXPECT_EQ(FloatToHalf(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(FloatToHalf(3 * 0x1p-25f), 0x0002);             // 1.5 units -> 2
  EXPECT_EQ(FloatToHalf(5 * 0x1p-25f), 0x0002);             // 2.5 units -> 2
  EXPECT_EQ(FloatToHalf(-0x1p-26f), 0x8000);                // -0
  EXPECT_EQ(FloatToHalf(1e-30f), 0x0000);
  EXPECT_EQ(FloatToHalf(0x1p-14f - 0x1p-26f), 0x0400);      // rounds up into the smallest normal
  EXPECT_EQ(FloatToHalf(1023.5f * 0x1p-24f), 0x0400);       // tie, odd 1023 -> 1024
}

#ifdef __FLT16_MAX__
TEST(Half, AgreesWithCompilerFloat16) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 2'000'000; ++i) {
    // Random bit patterns concentrated on the f16 range, plus the full float range.
    uint32_t u = rng();
    if (i % 2 == 0) u = (u & 0x807fffffu) | ((100u + (u >> 23) % 45u) << 23);
    const float f = FromBits(u);
    if (std::isnan(f)) continue;
    const _Float16 ref = static_cast<_Float16>(f);
    uint16_t ref_bits;
    std::memcpy(&ref_bits, &ref, 2);
    ASSERT_EQ(FloatToHalf(f), ref_bits) << std::hex << u;
  }
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    if (HalfIsNan(h)) continue;
    _Float16 x;
    std::memcpy(&x, &h, 2);
    ASSERT_EQ(Bits(HalfToFloat(h)), Bits(static_cast<float>(x))) << std::hex << i;
  }
}
#endif

TEST(BF16, RoundTripAndRounding) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t b = static_cast<uint16_t>(i);
    const float f = BF16ToFloat(b);
    EXPECT_EQ(Bits(f), i << 16);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(BF16ToFloat(FloatToBF16(f)))) << std::hex << i;
    } else {
      EXPECT_EQ(FloatToBF16(f), b) << std::hex << i;
    }
  }
  EXPECT_EQ(FloatToBF16(1.0f + 0x1p-8f), 0x3f80);      // tie -> 1.0 (even)
  EXPECT_EQ(FloatToBF16(1.0f + 3 * 0x1p-8f), 0x3f82);  // tie -> even neighbour above
  EXPECT_EQ(FloatToBF16(std::nextafter(1.0f + 0x1p-8f, 2.0f)), 0x3f81);
  EXPECT_EQ(FloatToBF16(3.14159265f), 0x4049);
  EXPECT_EQ(FloatToBF16(3.4e38f), 0x7f80);             // rounds past the largest bf16 to inf
  EXPECT_EQ(FloatToBF16(-INFINITY), 0xff80);
  // A NaN whose payload sits only in the low 16 bits must not become inf.
  EXPECT_TRUE(std::isnan(BF16ToFloat(FloatToBF16(FromBits(0x7f800001u)))));
}

}  // namespace
}  // namespace doppler::graph
