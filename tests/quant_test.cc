// Tests of the block-format reference against ggml's own output (quant/ fixtures): decoding
// must be bit-exact, and quantizing must give ggml's bytes.
#include "quant/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "graph/half.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/fixtures.h"
#include "tests/support/npy.h"

namespace doppler::quant {
namespace {

namespace fs = std::filesystem;
using graph::DType;

fs::path QuantDir() { return test::FixturesDir() / "quant"; }

std::vector<uint8_t> ReadBytes(const fs::path& p) {
  const std::string bytes = test::ReadFileBytes(p);
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

test::NpyArray Npy(const std::string& name) {
  absl::StatusOr<test::NpyArray> a = test::ReadNpy(QuantDir() / name);
  EXPECT_TRUE(a.ok()) << a.status();
  return a.ok() ? *a : test::NpyArray{};
}

double Rmse(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(s / a.size());
}

std::vector<float> Dequantize(DType t, const std::vector<uint8_t>& bytes, int64_t n) {
  std::vector<float> out(n);
  absl::Status st = DequantizeRow(t, bytes.data(), n, out.data());
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

struct Case {
  DType dtype;
  const char* key;  // in quant_refs.json
};
const Case kCases[] = {{DType::kQ8_0, "q8_0"}, {DType::kQ4_K, "q4_K"}, {DType::kQ6_K, "q6_K"}};

// The blocks in `stem`.bin decode to `stem`_dequant_f32.npy bit for bit.
void ExpectBitExact(DType dtype, const std::string& stem) {
  const std::vector<uint8_t> bytes = ReadBytes(QuantDir() / (stem + ".bin"));
  const test::NpyArray want = Npy(stem + "_dequant_f32.npy");
  ASSERT_FALSE(want.data.empty()) << stem;
  ASSERT_EQ(bytes.size(), graph::ByteSize(dtype, want.data.size())) << stem;
  const std::vector<float> got = Dequantize(dtype, bytes, want.data.size());
  int mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want.data[i], 4) != 0 && ++mismatches <= 5) {
      ADD_FAILURE() << stem << " value " << i << ": " << got[i] << " vs ggml " << want.data[i];
    }
  }
  EXPECT_EQ(mismatches, 0) << stem;
}

TEST(QuantTest, DequantizeIsBitExactWithGgml) {
  for (const Case& c : kCases) ExpectBitExact(c.dtype, c.key);
}

// MXFP4 blocks from gguf-py's quantizer (GPT-OSS's expert format), decoded as gguf-py does.
TEST(QuantTest, MXFP4DequantizeIsBitExact) { ExpectBitExact(DType::kMXFP4, "types/mxfp4"); }

// Byte-exact with ggml's reference quantizers for all three fixture types.
TEST(QuantTest, QuantizeReproducesGgmlBytes) {
  const test::NpyArray input = Npy("input_f32.npy");
  ASSERT_EQ(input.shape, (std::vector<int64_t>{64, 512}));
  const nlohmann::json refs = test::ReadJsonFile(QuantDir() / "quant_refs.json");
  for (const Case& c : kCases) {
    absl::StatusOr<std::vector<uint8_t>> got = QuantizeRows(c.dtype, input.data.data(), 64, 512);
    ASSERT_TRUE(got.ok()) << got.status();
    const std::vector<uint8_t> want = ReadBytes(QuantDir() / (std::string(c.key) + ".bin"));
    ASSERT_EQ(got->size(), want.size()) << c.key;
    const int block = graph::Info(c.dtype).block_bytes;
    int bad_blocks = 0;
    for (size_t b = 0; b < want.size() / block; ++b) {
      if (std::memcmp(got->data() + b * block, want.data() + b * block, block) != 0 && ++bad_blocks <= 3) {
        ADD_FAILURE() << c.key << ": block " << b << " (row " << b / (512 / graph::Info(c.dtype).block_elems)
                      << ") differs from ggml's";
      }
    }
    EXPECT_EQ(bad_blocks, 0) << c.key;
    // The error against the input then equals the reference's too (a check that holds even
    // if a future change made the bytes differ).
    const double rmse = Rmse(Dequantize(c.dtype, *got, input.data.size()), input.data);
    EXPECT_LE(rmse, refs["types"][c.key]["checks"]["rmse_vs_input"].get<double>() * (1 + 1e-9)) << c.key;
  }
}

// Q5_K has no fixture: a hand-made block checks the field layout, and a round trip checks that
// the quantizer and the decoder agree and that 5 bits beat Q4_K's 4.
TEST(QuantTest, Q5KLayoutAndRoundTrip) {
  std::vector<uint8_t> block(176, 0);
  const uint16_t one = graph::FloatToHalf(1.0f), half = graph::FloatToHalf(0.5f);
  block[0] = one & 0xff, block[1] = one >> 8;    // d = 1
  block[2] = half & 0xff, block[3] = half >> 8;  // dmin = 0.5
  block[4 + 1] = 3;                              // sub-block 1: scale 3
  block[4 + 5] = 2;                              // sub-block 1: min 2
  block[4 + 8 + 2] = 0x45;                       // sub-block 6: scale 5 (low nibble), min 4
  block[4 + 2] = 1 << 6;                         // sub-block 6: scale += 16
  block[48 + 7] = 0x90;                          // value 32+7 (sub-block 1): low 4 bits 9
  block[16 + 7] = 1 << 1;                        // ... fifth bit (qh bit 1): q = 25
  block[48 + 96 + 3] = 0x0c;                     // value 192+3 (sub-block 6): q = 12
  const std::vector<float> y = Dequantize(DType::kQ5_K, block, 256);
  EXPECT_EQ(y[39], 3.0f * 25 - 0.5f * 2);
  EXPECT_EQ(y[195], 21.0f * 12 - 0.5f * 4);
  EXPECT_EQ(y[40], -1.0f);  // q = 0 in sub-block 1

  const test::NpyArray input = Npy("input_f32.npy");
  absl::StatusOr<std::vector<uint8_t>> q5 = QuantizeRows(DType::kQ5_K, input.data.data(), 64, 512);
  absl::StatusOr<std::vector<uint8_t>> q4 = QuantizeRows(DType::kQ4_K, input.data.data(), 64, 512);
  ASSERT_TRUE(q5.ok() && q4.ok());
  ASSERT_EQ(q5->size(), 64u * 2 * 176);
  const std::vector<float> d5 = Dequantize(DType::kQ5_K, *q5, input.data.size());
  const std::vector<float> d4 = Dequantize(DType::kQ4_K, *q4, input.data.size());
  for (int r = 0; r < 56; ++r) {  // the Gaussian rows: each one's error well under its Q4_K error
    std::vector<float> x(input.data.begin() + r * 512, input.data.begin() + (r + 1) * 512);
    std::vector<float> a(d5.begin() + r * 512, d5.begin() + (r + 1) * 512);
    std::vector<float> b(d4.begin() + r * 512, d4.begin() + (r + 1) * 512);
    EXPECT_LT(Rmse(a, x), 0.7 * Rmse(b, x)) << "row " << r;
  }
}

TEST(QuantTest, FloatTypesPassThrough) {
  const std::vector<float> x = {1.0f, -2.5f, 3.25f, 0.0f};
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    absl::StatusOr<std::vector<uint8_t>> q = QuantizeRows(t, x.data(), 2, 2);
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_EQ(Dequantize(t, *q, 4), x) << graph::Name(t);
  }
}

// Q5_0 (no ggml fixture): blocks built by hand, decoded and quantized by the format's definition —
// f16 d, qh (bit j: the fifth bit of value j), qs[16] (value j < 16 the low nibble of qs[j], value
// j + 16 its high nibble), value = (q - 16) * d; ggml's quantizer takes d = -m / 16 for the m of
// largest magnitude and q = min(31, trunc(x / d + 16.5)).
TEST(QuantTest, Q5_0DecodesByItsDefinition) {
  std::vector<uint8_t> block(22, 0);
  block[1] = 0x38;                  // d = 0.5
  block[2] = 0x01;                  // fifth bit of value 0
  block[5] = 0x80;                  // fifth bit of value 31
  for (int j = 0; j < 16; ++j) block[6 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const std::vector<float> y = Dequantize(DType::kQ5_0, block, 32);
  const float want[32] = {0,    -7.5, -7,   -6.5, -6,   -5.5, -5,   -4.5, -4,   -3.5, -3,   -2.5, -2,   -1.5, -1,   -0.5,
                          -0.5, -1,   -1.5, -2,   -2.5, -3,   -3.5, -4,   -4.5, -5,   -5.5, -6,   -6.5, -7,   -7.5, 0};
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], want[i]) << i;
}

TEST(QuantTest, Q5_0QuantizesAsGgml) {
  // x = j - 16: the largest magnitude is -16, so d = 1 and q = j.
  std::vector<float> ramp(32);
  for (int j = 0; j < 32; ++j) ramp[j] = static_cast<float>(j - 16);
  absl::StatusOr<std::vector<uint8_t>> q = QuantizeRows(DType::kQ5_0, ramp.data(), 1, 32);
  ASSERT_TRUE(q.ok()) << q.status();
  std::vector<uint8_t> want = {0x00, 0x3C, 0x00, 0x00, 0xFF, 0xFF};
  for (int j = 0; j < 16; ++j) want.push_back(static_cast<uint8_t>(j | (j << 4)));
  EXPECT_EQ(*q, want);
  // One value 4 among zeros: d = -0.25, so 4 becomes q = 0 and every 0 becomes q = 16 (nibble 0,
  // fifth bit set).
  std::vector<float> spike(32, 0.0f);
  spike[5] = 4.0f;
  q = QuantizeRows(DType::kQ5_0, spike.data(), 1, 32);
  ASSERT_TRUE(q.ok()) << q.status();
  want = {0x00, 0xB4, 0xDF, 0xFF, 0xFF, 0xFF};
  want.resize(22, 0);
  EXPECT_EQ(*q, want);
  EXPECT_EQ(Dequantize(DType::kQ5_0, *q, 32), spike);
  // Random rows come back within half a step (a step near -m, whose q = 32 is clamped to 31).
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(4 * 96);
  for (float& v : x) v = normal(rng);
  q = QuantizeRows(DType::kQ5_0, x.data(), 4, 96);
  ASSERT_TRUE(q.ok()) << q.status();
  ASSERT_EQ(q->size(), 4u * 3u * 22u);
  const std::vector<float> back = Dequantize(DType::kQ5_0, *q, static_cast<int64_t>(x.size()));
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
    const float step = amax / 16;
    for (int i = 0; i < 32; ++i) {
      const size_t at = 32 * b + i;
      const float steps = std::fabs(x[at]) >= amax * 15 / 16 ? 1.0f : 0.5f;  // d's f16 rounding: under 1%
      EXPECT_LE(std::fabs(back[at] - x[at]), steps * step * 1.01f) << at;
    }
  }
}

TEST(QuantTest, OddInputsAreHandled) {
  float out[32];
  std::vector<uint8_t> any(64, 0);
  EXPECT_FALSE(DequantizeRow(DType::kQ8_0, any.data(), 33, out).ok());
  EXPECT_FALSE(DequantizeRow(DType::kI32, any.data(), 1, out).ok());
  EXPECT_FALSE(DequantizeRow(DType::kQ8_0, any.data(), -32, out).ok());
  std::vector<float> x(256, 1.0f);
  EXPECT_FALSE(QuantizeRows(DType::kQ4_K, x.data(), 1, 255).ok());
  EXPECT_FALSE(QuantizeRows(DType::kI32, x.data(), 1, 1).ok());
  EXPECT_FALSE(QuantizeRows(DType::kQ8_0, x.data(), INT64_MAX / 2, 64).ok());
  // Non-finite inputs give some bytes, not a crash or undefined behaviour.
  x[3] = NAN;
  x[9] = INFINITY;
  x[100] = -INFINITY;
  for (DType t : {DType::kQ8_0, DType::kQ5_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    EXPECT_TRUE(QuantizeRows(t, x.data(), 1, 256).ok()) << graph::Name(t);
  }
}

}  // namespace
}  // namespace doppler::quant
