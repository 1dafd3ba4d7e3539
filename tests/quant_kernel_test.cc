// Kernels reading llama.cpp's block formats (Q8_0, Q5_0, Q4_K, Q5_K, Q6_K, Q4_0, Q4_1, Q5_1, Q2_K, Q3_K,
// IQ4_NL, IQ4_XS, MXFP4) straight from their blocks,
// against the interpreter fed the dequantized values: matmul (decode and prefill tiles, row counts
// that are not multiples of the tile) and embedding gathers, which must decode bit for bit as
// quant/ does; and ggml's own quantized fixture rows decoded on the GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "backend_vk/plan.h"
#include "codegen/device_layout.h"
#include "formats/gguf/gguf_file.h"
#include "graph/builder.h"
#include "graph/verifier.h"
#include "nlohmann/json.hpp"
#include "passes/pass.h"
#include "quant/quant.h"
#include "tests/support/fixtures.h"
#include "tests/support/gpu_runner.h"
#include "tests/support/graph_values.h"
#include "tests/support/npy.h"
#include "tests/support/vk_test_env.h"

namespace doppler {
namespace {

using graph::Dim;
using graph::DType;
using graph::GraphBuilder;
using graph::Tensor;
using graph::TensorType;
using graph::ValueId;
using test::Matrix;
using test::RandomRows;
using test::Rows;
using test::Vector;



// On the device each Q6_K row is split by field (the quants of all its blocks, then their scales,
// then their f16 d's, then padding to 16 bytes), a Q8_0 block has 2 bytes of padding after its
// scale; every other format lies as stored.
TEST(DeviceLayout, SplitsQ6KRowsAndPadsQ8_0Blocks) {
  // Q6_K rows of 3 blocks: 576 bytes of quants, 48 of scales, 6 of d, 10 of padding.
  const codegen::DeviceRow q6 = codegen::DeviceRowOf(DType::kQ6_K, 768);
  EXPECT_TRUE(q6.split);
  EXPECT_EQ(q6.bytes, 640);
  EXPECT_EQ(q6.scales_at, 576);
  EXPECT_EQ(q6.d_at, 624);
  EXPECT_EQ(codegen::DeviceByteSize(DType::kQ6_K, 2 * 768, 768), 1280u);
  EXPECT_EQ(codegen::DeviceByteSize(DType::kQ8_0, 2 * 96, 96), 216u);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_K, DType::kQ5_K, DType::kQ8_0}) {
    EXPECT_FALSE(codegen::DeviceRowOf(t, 768).split) << graph::Name(t);
  }
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_K, DType::kQ5_K}) {
    EXPECT_EQ(codegen::DeviceByteSize(t, 2 * 768, 768), graph::ByteSize(t, 2 * 768)) << graph::Name(t);
  }

  std::vector<uint8_t> stored(2 * 3 * 210);
  for (size_t i = 0; i < stored.size(); ++i) stored[i] = static_cast<uint8_t>(1 + i % 251);
  const std::vector<uint8_t> device = codegen::ToDeviceLayout(DType::kQ6_K, 768, stored);
  ASSERT_EQ(device.size(), 2u * 640u);
  for (size_t r = 0; r < 2; ++r) {
    const auto row = device.begin() + 640 * r;
    for (size_t b = 0; b < 3; ++b) {
      const auto block = stored.begin() + 210 * (3 * r + b);
      EXPECT_TRUE(std::equal(block, block + 192, row + 192 * b)) << r << " " << b;            // ql, qh
      EXPECT_TRUE(std::equal(block + 192, block + 208, row + 576 + 16 * b)) << r << " " << b;  // scales
      EXPECT_TRUE(std::equal(block + 208, block + 210, row + 624 + 2 * b)) << r << " " << b;   // d
    }
    EXPECT_TRUE(std::all_of(row + 630, row + 640, [](uint8_t v) { return v == 0; })) << r;
  }
  // Q8_0: d, 2 bytes of padding, the 32 quants.
  const std::vector<uint8_t> q8 = codegen::ToDeviceLayout(DType::kQ8_0, 64, std::vector<uint8_t>(stored.begin(), stored.begin() + 68));
  ASSERT_EQ(q8.size(), 72u);
  for (size_t b = 0; b < 2; ++b) {
    EXPECT_EQ(q8[36 * b], stored[34 * b]);
    EXPECT_EQ(q8[36 * b + 1], stored[34 * b + 1]);
    EXPECT_EQ(q8[36 * b + 2], 0);
    EXPECT_EQ(q8[36 * b + 3], 0);
    EXPECT_TRUE(std::equal(stored.begin() + 34 * b + 2, stored.begin() + 34 * (b + 1), q8.begin() + 36 * b + 4)) << b;
  }
  const std::vector<uint8_t> q4(2 * 144, 7);
  EXPECT_EQ(codegen::ToDeviceLayout(DType::kQ4_K, 256, q4), q4);
}

// Q5_0 rows are split too: the nibbles (16 bytes a block), the fifth bits (4), the f16 d (2), then
// padding to 16 bytes.
TEST(DeviceLayout, SplitsQ5_0Rows) {
  const codegen::DeviceRow row = codegen::DeviceRowOf(DType::kQ5_0, 96);  // 3 blocks
  EXPECT_TRUE(row.split);
  EXPECT_EQ(row.bytes, 80);
  EXPECT_EQ(row.scales_at, 48);
  EXPECT_EQ(row.d_at, 60);
  EXPECT_EQ(codegen::DeviceByteSize(DType::kQ5_0, 2 * 96, 96), 160u);
  std::vector<uint8_t> stored(2 * 3 * 22);
  for (size_t i = 0; i < stored.size(); ++i) stored[i] = static_cast<uint8_t>(1 + i % 251);
  const std::vector<uint8_t> device = codegen::ToDeviceLayout(DType::kQ5_0, 96, stored);
  ASSERT_EQ(device.size(), 160u);
  for (size_t r = 0; r < 2; ++r) {
    const auto at = device.begin() + 80 * r;
    for (size_t b = 0; b < 3; ++b) {
      const auto block = stored.begin() + 22 * (3 * r + b);
      EXPECT_TRUE(std::equal(block + 6, block + 22, at + 16 * b)) << r << " " << b;      // qs
      EXPECT_TRUE(std::equal(block + 2, block + 6, at + 48 + 4 * b)) << r << " " << b;   // qh
      EXPECT_TRUE(std::equal(block, block + 2, at + 60 + 2 * b)) << r << " " << b;       // d
    }
    EXPECT_TRUE(std::all_of(at + 66, at + 80, [](uint8_t v) { return v == 0; })) << r;
  }
}

// MXFP4's 17-byte blocks: split rows of the 16 bytes of nibbles of every block, then the blocks'
// E8M0 scale bytes, then padding to 16 bytes.
TEST(DeviceLayout, SplitsMxfp4Rows) {
  const codegen::DeviceRow row = codegen::DeviceRowOf(DType::kMXFP4, 96);  // 3 blocks
  EXPECT_TRUE(row.split);
  EXPECT_EQ(row.bytes, 64);
  EXPECT_EQ(row.scales_at, 48);
  EXPECT_EQ(codegen::DeviceByteSize(DType::kMXFP4, 2 * 96, 96), 128u);
  std::vector<uint8_t> stored(2 * 3 * 17);
  for (size_t i = 0; i < stored.size(); ++i) stored[i] = static_cast<uint8_t>(1 + i % 251);
  const std::vector<uint8_t> device = codegen::ToDeviceLayout(DType::kMXFP4, 96, stored);
  ASSERT_EQ(device.size(), 128u);
  for (size_t r = 0; r < 2; ++r) {
    const auto at = device.begin() + 64 * r;
    for (size_t b = 0; b < 3; ++b) {
      const auto block = stored.begin() + 17 * (3 * r + b);
      EXPECT_TRUE(std::equal(block + 1, block + 17, at + 16 * b)) << r << " " << b;  // qs
      EXPECT_EQ(at[48 + b], block[0]) << r << " " << b;                              // e
    }
    EXPECT_TRUE(std::all_of(at + 51, at + 64, [](uint8_t v) { return v == 0; })) << r;
  }
}

class QuantKernelTest : public vk::VkTest {
 protected:
  // Runs `g` on the GPU and the interpreter for each step and returns the worst relative error of
  // output "y" (-1 on failure, reported through gtest).
  double WorstError(const graph::Graph& g, const test::RandomParams& params, int64_t bucket,
                    const std::vector<std::pair<std::map<std::string, Tensor>, uint32_t>>& steps) {
    auto gpu = test::GpuRunner::Create(ctx(), g, bucket, params);
    EXPECT_TRUE(gpu.ok()) << gpu.status();
    if (!gpu.ok()) return -1;
    tolerance_ = test::ToleranceFor((*gpu)->plan(), 1e-5);
    graph::Interpreter interp(params);
    double worst = 0;
    for (const auto& [inputs, pos] : steps) {
      auto want = interp.Run(g, inputs, pos);
      EXPECT_TRUE(want.ok()) << want.status();
      auto got = (*gpu)->Run(inputs, pos);
      EXPECT_TRUE(got.ok()) << got.status();
      if (!want.ok() || !got.ok()) return -1;
      const Tensor& a = got->at("y");
      const Tensor& b = want->at("y");
      EXPECT_EQ(a.shape, b.shape);
      if (a.f.size() != b.f.size()) return -1;
      worst = std::max(worst, test::RelativeError(a.f, b.f));
    }
    return worst;
  }
  double tolerance_ = 1e-5;  // for the last plan WorstError ran
};

struct QuantMatMulCase {
  DType dtype;
  int64_t tokens, bucket, k, n;
};

class QuantMatMulTest : public QuantKernelTest, public ::testing::WithParamInterface<QuantMatMulCase> {};

TEST_P(QuantMatMulTest, MatchesInterpreterOnDequantizedWeights) {
  const QuantMatMulCase& c = GetParam();
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(c.k));
  b.Output("y", b.MatMul(x, b.Param("w", Matrix(c.n, c.k, c.dtype))));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  test::RandomParams params(*g, 77);
  // A full step, then a single token at a later position (a bucket-sized plan run short).
  const double err = WorstError(*g, params, c.bucket, {{{{"x", RandomRows(c.tokens, c.k, 1)}}, 0}, {{{"x", RandomRows(1, c.k, 2)}}, 3}});
  std::printf("[ matmul %s t%lld k%lld n%lld ] relative error %.3g\n", graph::Name(c.dtype),
              static_cast<long long>(c.tokens), static_cast<long long>(c.k), static_cast<long long>(c.n), err);
  // Same weights on both sides; only the order of the K-long sums differs (f32 on the GPU, double in
  // the interpreter), and on cooperative-matrix units the f16 rounding of the operands.
  EXPECT_GE(err, 0);
  EXPECT_LE(err, tolerance_);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, QuantMatMulTest,
    ::testing::Values(QuantMatMulCase{DType::kQ8_0, 1, 1, 96, 37}, QuantMatMulCase{DType::kQ8_0, 13, 16, 160, 67},
                      QuantMatMulCase{DType::kQ4_K, 1, 1, 512, 37}, QuantMatMulCase{DType::kQ4_K, 13, 16, 256, 9},
                      QuantMatMulCase{DType::kQ5_K, 1, 1, 256, 21}, QuantMatMulCase{DType::kQ5_K, 5, 8, 512, 7},
                      QuantMatMulCase{DType::kQ6_K, 1, 1, 512, 67}, QuantMatMulCase{DType::kQ6_K, 13, 16, 256, 5},
                      QuantMatMulCase{DType::kQ5_0, 1, 1, 96, 37}, QuantMatMulCase{DType::kQ5_0, 13, 16, 160, 67},
                      QuantMatMulCase{DType::kQ5_0, 1, 1, 4160, 3},
                      // Rows longer than the matrix-vector kernel stages at once.
                      QuantMatMulCase{DType::kQ4_K, 1, 1, 4608, 9}, QuantMatMulCase{DType::kQ8_0, 1, 1, 4160, 3},
                      // Enough rows for 4 per matrix-vector workgroup (a Q6_K LM head's, read as used).
                      QuantMatMulCase{DType::kQ6_K, 1, 1, 256, 8200},
                      QuantMatMulCase{DType::kQ4_0, 1, 1, 96, 37}, QuantMatMulCase{DType::kQ4_0, 13, 16, 160, 67},
                      QuantMatMulCase{DType::kQ4_1, 1, 1, 96, 37}, QuantMatMulCase{DType::kQ4_1, 13, 16, 160, 67},
                      QuantMatMulCase{DType::kQ5_1, 1, 1, 96, 37}, QuantMatMulCase{DType::kQ5_1, 13, 16, 160, 67},
                      QuantMatMulCase{DType::kIQ4_NL, 1, 1, 96, 37}, QuantMatMulCase{DType::kIQ4_NL, 13, 16, 160, 67},
                      QuantMatMulCase{DType::kQ2_K, 1, 1, 512, 37}, QuantMatMulCase{DType::kQ2_K, 13, 16, 256, 9},
                      QuantMatMulCase{DType::kQ3_K, 1, 1, 512, 37}, QuantMatMulCase{DType::kQ3_K, 13, 16, 256, 9},
                      QuantMatMulCase{DType::kIQ4_XS, 1, 1, 512, 37}, QuantMatMulCase{DType::kIQ4_XS, 13, 16, 256, 9},
                      QuantMatMulCase{DType::kIQ4_XS, 1, 1, 4608, 9},
                      QuantMatMulCase{DType::kMXFP4, 1, 1, 96, 37}, QuantMatMulCase{DType::kMXFP4, 13, 16, 160, 67},
                      // Prefill tiles (buckets over the matrix-vector kernel's rows).
                      QuantMatMulCase{DType::kQ4_0, 20, 32, 160, 67}, QuantMatMulCase{DType::kQ4_1, 20, 32, 96, 37},
                      QuantMatMulCase{DType::kQ5_1, 20, 32, 160, 67}, QuantMatMulCase{DType::kIQ4_NL, 20, 32, 96, 37},
                      QuantMatMulCase{DType::kQ2_K, 20, 32, 256, 9}, QuantMatMulCase{DType::kQ3_K, 20, 32, 512, 37},
                      QuantMatMulCase{DType::kIQ4_XS, 20, 32, 256, 9}, QuantMatMulCase{DType::kMXFP4, 20, 32, 96, 37},
                      // Buckets of 128 rows: the cooperative-matrix tiles where the device has them (a
                      // partial second tile; K of 160 no multiple of their 64-wide slices).
                      QuantMatMulCase{DType::kQ8_0, 70, 128, 160, 67}, QuantMatMulCase{DType::kQ4_K, 70, 128, 256, 37},
                      QuantMatMulCase{DType::kQ5_K, 70, 128, 256, 37}, QuantMatMulCase{DType::kQ6_K, 70, 128, 256, 37},
                      QuantMatMulCase{DType::kQ5_0, 70, 128, 160, 67}, QuantMatMulCase{DType::kQ4_0, 70, 128, 160, 67},
                      QuantMatMulCase{DType::kQ4_1, 70, 128, 160, 67}, QuantMatMulCase{DType::kQ5_1, 70, 128, 160, 67},
                      QuantMatMulCase{DType::kIQ4_NL, 70, 128, 160, 67}, QuantMatMulCase{DType::kIQ4_XS, 70, 128, 256, 37},
                      QuantMatMulCase{DType::kMXFP4, 70, 128, 160, 67}, QuantMatMulCase{DType::kQ2_K, 70, 128, 256, 37},
                      QuantMatMulCase{DType::kQ3_K, 70, 128, 256, 37}),
    [](const ::testing::TestParamInfo<QuantMatMulCase>& i) {
      const QuantMatMulCase& c = i.param;
      return std::string(graph::Name(c.dtype)) + "_t" + std::to_string(c.tokens) + "_k" + std::to_string(c.k) +
             "_n" + std::to_string(c.n);
    });

// Matmuls whose x is rounded through q8 blocks (q8-activations): the matrix-vector kernel's
// integer dot products against the interpreter running the same graph (graph::RoundThroughQ8, then
// the product with the dequantized weights), with a norm prologue and gated or added epilogues, and
// rows long enough to be staged in segments.
struct Q8MatMulCase {
  DType dtype;
  int64_t tokens, bucket, k, n;
  bool fused;  // rms_norm prologue, silu_mul (and add where the rows allow) epilogue
};

void PrintTo(const Q8MatMulCase& c, std::ostream* os) {
  *os << graph::Name(c.dtype) << " t" << c.tokens << " k" << c.k << " n" << c.n << (c.fused ? " fused" : "");
}

class Q8MatMulTest : public QuantKernelTest, public ::testing::WithParamInterface<Q8MatMulCase> {};

// x in [-1, 1) with one value in eight scaled by 8, so that the blocks' scales vary and the
// rounding moves most values far more than an f32 product would.
graph::Tensor RowsWithOutliers(int64_t tokens, int64_t k, uint32_t seed) {
  graph::Tensor t = RandomRows(tokens, k, seed);
  for (size_t i = seed % 8; i < t.f.size(); i += 8 + (i % 3)) t.f[i] *= 8.0f;
  return t;
}

TEST_P(Q8MatMulTest, MatchesTheInterpreterRoundingXThroughQ8) {
  const Q8MatMulCase& c = GetParam();
  if (!ctx().info().int_dot_product) GTEST_FAIL() << "the device has no integer dot products";
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(c.k));
  ValueId w = b.Param("w", Matrix(c.fused ? 2 * c.n : c.n, c.k, c.dtype));
  ValueId y = c.fused ? b.MatMulWithNorm(x, b.Param("g", Vector(c.k)), 1e-5, 1.0, w, {b.Input("r", Rows(c.n))},
                                         "silu_mul,add")
                      : b.MatMul(x, w);
  b.Output("y", y);
  auto exact = std::move(b).Finish();
  ASSERT_TRUE(exact.ok()) << exact.status();
  graph::Graph g = *exact;
  auto pass = passes::MakePass("q8-activations");
  ASSERT_TRUE(pass.ok()) << pass.status();
  auto changed = (*pass)->Run(g);
  ASSERT_TRUE(changed.ok() && *changed);
  ASSERT_TRUE(graph::Verify(g).ok());
  test::RandomParams params(g, 91);
  std::map<std::string, Tensor> inputs = {{"x", RowsWithOutliers(c.tokens, c.k, 3)}};
  if (c.fused) inputs["r"] = RandomRows(c.tokens, c.n, 4);
  auto want = graph::Interpreter(params).Run(g, inputs, 0);
  ASSERT_TRUE(want.ok()) << want.status();
  auto unrounded = graph::Interpreter(params).Run(*exact, inputs, 0);
  ASSERT_TRUE(unrounded.ok()) << unrounded.status();
  const double rounding = test::RelativeError(unrounded->at("y").f, want->at("y").f);
  EXPECT_GE(rounding, 5e-3) << "the inputs do not tell a rounded x from an exact one";
  // Teams of a subgroup (where the device has subgroup arithmetic) and blocks of x scaled through
  // subgroup shuffles, and teams of the whole workgroup and scales through shared memory.
  codegen::TargetCaps portable = vk::TargetCapsOf(ctx().info());
  portable.subgroup_arithmetic = false;
  portable.subgroup_shuffle = false;
  for (const std::optional<codegen::TargetCaps>& caps : {std::optional<codegen::TargetCaps>(), std::optional(portable)}) {
    auto gpu = test::GpuRunner::Create(ctx(), g, c.bucket, params, caps);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    const std::string& variant = (*gpu)->plan().dispatches()[0].variant;
    ASSERT_NE(variant.find("gemv_q8."), std::string::npos) << variant;
    auto got = (*gpu)->Run(inputs, 0);
    ASSERT_TRUE(got.ok()) << got.status();
    const double err = test::RelativeError(got->at("y").f, want->at("y").f);
    std::printf("[ q8 matmul %s t%lld k%lld n%lld%s ] %s: relative error %.3g (the rounding itself: %.3g)\n",
                graph::Name(c.dtype), static_cast<long long>(c.tokens), static_cast<long long>(c.k),
                static_cast<long long>(c.n), c.fused ? " fused" : "", variant.c_str(), err, rounding);
    // Both sides multiply the same 8-bit quants; the sums' order differs. With a norm prologue the
    // kernel rounds x·g / d (1 / rms applied to the sums), the interpreter x·g/rms / (d/rms): a
    // value within an ulp of a half may round the other way, moving one product by d·w (under 1e-3
    // of the largest result here, against the rounding's own 5e-3 and more).
    EXPECT_LE(err, c.fused ? 1e-3 : 2e-5) << variant;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Q8MatMulTest,
    ::testing::Values(Q8MatMulCase{DType::kQ8_0, 1, 1, 96, 37, false}, Q8MatMulCase{DType::kQ8_0, 3, 4, 160, 67, true},
                      Q8MatMulCase{DType::kQ4_K, 1, 1, 512, 37, false}, Q8MatMulCase{DType::kQ4_K, 13, 16, 256, 9, true},
                      Q8MatMulCase{DType::kQ5_K, 1, 1, 256, 21, true}, Q8MatMulCase{DType::kQ5_K, 5, 8, 512, 7, false},
                      Q8MatMulCase{DType::kQ6_K, 1, 1, 512, 67, true}, Q8MatMulCase{DType::kQ6_K, 13, 16, 256, 5, false},
                      Q8MatMulCase{DType::kQ5_0, 1, 1, 96, 37, false}, Q8MatMulCase{DType::kQ5_0, 3, 4, 160, 67, true},
                      Q8MatMulCase{DType::kQ5_0, 1, 1, 1152, 300, true},
                      // Gated rows of 5 parts: a team takes two output columns' parts as one list
                      // (flat), on 8 lanes as on 32.
                      Q8MatMulCase{DType::kQ5_0, 1, 1, 160, 67, true},
                      // Many row groups a team; rows staged in two segments (4 rows of 6,144 values).
                      Q8MatMulCase{DType::kQ4_K, 1, 1, 256, 4100, false}, Q8MatMulCase{DType::kQ8_0, 1, 1, 64, 40000, false},
                      Q8MatMulCase{DType::kQ4_K, 1, 1, 1024, 33000, false},
                      // Over 2^24 weights: four dot products a team for rows under 4,096 values, two
                      // for rows under 8,192; one, two iterations in flight, for rows of 8,192 or
                      // more.
                      Q8MatMulCase{DType::kQ4_K, 1, 1, 1024, 8300, true}, Q8MatMulCase{DType::kQ4_K, 1, 1, 4096, 4100, true},
                      Q8MatMulCase{DType::kQ4_K, 1, 1, 8448, 23, true}, Q8MatMulCase{DType::kQ6_K, 1, 1, 8192, 67, false},
                      Q8MatMulCase{DType::kQ4_K, 4, 4, 6144, 9, true},
                      // Workgroups widened to stage x for more rows, still at least 128 of them (64
                      // for rows of 4,096 values or more).
                      Q8MatMulCase{DType::kQ4_K, 1, 1, 8448, 4096, false},
                      Q8MatMulCase{DType::kQ6_K, 2, 2, 6144, 3, false},
                      // 13 rows of 16 in one block, many row groups a team.
                      Q8MatMulCase{DType::kQ6_K, 13, 16, 512, 20011, false},
                      // 13 rows of 16 in 4 blocks of rows, interleaved along the grid.
                      Q8MatMulCase{DType::kQ4_K, 13, 16, 6144, 1000, false},
                      Q8MatMulCase{DType::kQ4_0, 1, 1, 96, 37, false}, Q8MatMulCase{DType::kQ4_0, 3, 4, 160, 67, true},
                      Q8MatMulCase{DType::kQ4_1, 1, 1, 96, 37, false}, Q8MatMulCase{DType::kQ4_1, 3, 4, 160, 67, true},
                      Q8MatMulCase{DType::kQ5_1, 1, 1, 96, 37, false}, Q8MatMulCase{DType::kQ5_1, 3, 4, 160, 67, true},
                      Q8MatMulCase{DType::kIQ4_NL, 1, 1, 96, 37, false}, Q8MatMulCase{DType::kIQ4_NL, 3, 4, 160, 67, true},
                      Q8MatMulCase{DType::kIQ4_XS, 1, 1, 512, 37, false}, Q8MatMulCase{DType::kIQ4_XS, 13, 16, 256, 9, true},
                      Q8MatMulCase{DType::kIQ4_XS, 1, 1, 8448, 23, true}, Q8MatMulCase{DType::kQ4_0, 1, 1, 4160, 300, false},
                      Q8MatMulCase{DType::kQ2_K, 1, 1, 512, 37, false}, Q8MatMulCase{DType::kQ2_K, 13, 16, 256, 9, true},
                      Q8MatMulCase{DType::kQ3_K, 1, 1, 512, 37, false}, Q8MatMulCase{DType::kQ3_K, 13, 16, 256, 9, true},
                      Q8MatMulCase{DType::kQ3_K, 1, 1, 6400, 23, true},
                      // IQ4's grid in shared memory, filled before the first segment of x is staged.
                      Q8MatMulCase{DType::kIQ4_XS, 4, 4, 6144, 9, true}, Q8MatMulCase{DType::kIQ4_NL, 1, 1, 64, 40000, false},
                      Q8MatMulCase{DType::kMXFP4, 1, 1, 1152, 300, false}, Q8MatMulCase{DType::kMXFP4, 3, 4, 160, 67, true}),
    [](const ::testing::TestParamInfo<Q8MatMulCase>& i) {
      const Q8MatMulCase& c = i.param;
      return std::string(graph::Name(c.dtype)) + "_t" + std::to_string(c.tokens) + "_k" + std::to_string(c.k) +
             "_n" + std::to_string(c.n) + (c.fused ? "_fused" : "");
    });

// The matrix-vector kernels at every row count a bucket up to kGemvMaxBucket holds (1, 3, 5, 8, 13
// and 16 rows, of buckets 1, 4, 8, 8, 16 and 16), the float one and (for integer quants) the q8
// one, with a norm prologue and a gated chain with a residual add, against the interpreter running
// the same graph. A bucket's rows are one block where x's q8 staging fits one segment
// (tuning::kOneSegmentBytes), else blocks of about as many rows each.
struct GemvRowsCase {
  DType dtype;
  int64_t k, n;
  int64_t q8_rows_of_16;  // the q8 kernel's rows a workgroup for a bucket of 16 (0: no q8 kernel)
};

void PrintTo(const GemvRowsCase& c, std::ostream* os) { *os << graph::Name(c.dtype) << " k" << c.k << " n" << c.n; }

class GemvRowsTest : public QuantKernelTest, public ::testing::WithParamInterface<GemvRowsCase> {};

TEST_P(GemvRowsTest, EveryRowCountMatchesTheInterpreter) {
  const GemvRowsCase& c = GetParam();
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(c.k));
  b.Output("y", b.MatMulWithNorm(x, b.Param("g", Vector(c.k)), 1e-5, 1.0, b.Param("w", Matrix(2 * c.n, c.k, c.dtype)),
                                 {b.Input("r", Rows(c.n))}, "silu_mul,add"));
  auto exact = std::move(b).Finish();
  ASSERT_TRUE(exact.ok()) << exact.status();
  std::vector<std::pair<graph::Graph, bool>> graphs = {{*exact, false}};  // (graph, x through q8)
  if (c.q8_rows_of_16 > 0) {
    graph::Graph rounded = *exact;
    auto pass = passes::MakePass("q8-activations");
    ASSERT_TRUE(pass.ok()) << pass.status();
    auto changed = (*pass)->Run(rounded);
    ASSERT_TRUE(changed.ok() && *changed);
    graphs.emplace_back(std::move(rounded), true);
  }
  for (const auto& [g, q8] : graphs) {
    test::RandomParams params(g, 21);
    for (auto [tokens, bucket] : {std::pair<int64_t, int64_t>{1, 1}, {3, 4}, {5, 8}, {8, 8}, {13, 16}, {16, 16}}) {
      if (q8 && !ctx().info().int_dot_product) GTEST_FAIL() << "the device has no integer dot products";
      const std::map<std::string, Tensor> inputs = {{"x", RandomRows(tokens, c.k, static_cast<uint32_t>(tokens))},
                                                    {"r", RandomRows(tokens, c.n, 40)}};
      auto want = graph::Interpreter(params).Run(g, inputs, 0);
      ASSERT_TRUE(want.ok()) << want.status();
      auto gpu = test::GpuRunner::Create(ctx(), g, bucket, params);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      ASSERT_EQ((*gpu)->plan().dispatches().size(), 1u);
      const std::string& variant = (*gpu)->plan().dispatches()[0].variant;
      EXPECT_EQ(variant.rfind(q8 ? "gemv_q8." : "gemv.", 0), 0u) << variant;
      if (q8 && bucket == 16) {
        EXPECT_NE(variant.find(absl::StrCat(".t", c.q8_rows_of_16, "x")), std::string::npos) << variant;
      }
      auto got = (*gpu)->Run(inputs, 0);
      ASSERT_TRUE(got.ok()) << got.status();
      const double err = test::RelativeError(got->at("y").f, want->at("y").f);
      std::printf("[ %s k%lld n%lld: %lld of %lld rows ] %s: relative error %.3g\n", graph::Name(c.dtype),
                  static_cast<long long>(c.k), static_cast<long long>(c.n), static_cast<long long>(tokens),
                  static_cast<long long>(bucket), variant.c_str(), err);
      // With x through q8 the kernel rounds x·g / d where the interpreter rounds x·g/rms / (d/rms)
      // (Q8MatMulTest); without, only the order of the sums differs.
      EXPECT_LE(err, q8 ? 1e-3 : 1e-5) << variant << ", " << tokens << " of " << bucket;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Formats, GemvRowsTest,
    ::testing::Values(GemvRowsCase{DType::kQ4_K, 768, 37, 16}, GemvRowsCase{DType::kQ6_K, 512, 45, 16},
                      GemvRowsCase{DType::kQ8_0, 416, 29, 16}, GemvRowsCase{DType::kQ5_0, 160, 67, 16},
                      GemvRowsCase{DType::kF16, 200, 37, 0}, GemvRowsCase{DType::kF16, 131, 21, 0},
                      // Rows too long for 16 of them in one segment: blocks of 4 (5 fit).
                      GemvRowsCase{DType::kQ4_K, 6144, 9, 4}),
    [](const ::testing::TestParamInfo<GemvRowsCase>& i) {
      const GemvRowsCase& c = i.param;
      return std::string(graph::Name(c.dtype)) + "_k" + std::to_string(c.k) + "_n" + std::to_string(c.n);
    });

// The LM head's argmax computed by the q8 matrix-vector kernel (a tail: codegen/in_matmul.h):
// every workgroup's first maximum, then the last workgroup's; the plan has no argmax dispatch. Run
// three times (the kernel resets its count of finished workgroups for the next).
class FusedArgmaxTest : public QuantKernelTest {
 protected:
  // The graph x -> logits = matmul(x, w) -> next = argmax(logits), through q8-activations.
  graph::Graph LmHead(DType dtype, int64_t k, int64_t n) {
    GraphBuilder b;
    ValueId logits = b.MatMul(b.Input("x", Rows(k)), b.Param("w", Matrix(n, k, dtype)));
    b.Output("logits", logits);
    b.Output("next", b.Argmax(logits));
    return WithPasses(std::move(b), {"q8-activations"});
  }
  // The builder's graph after `passes`, verified.
  static graph::Graph WithPasses(GraphBuilder b, const std::vector<const char*>& passes) {
    graph::Graph g = *std::move(b).Finish();
    for (const char* name : passes) {
      auto pass = passes::MakePass(name);
      EXPECT_TRUE(pass.ok() && (*pass)->Run(g).ok()) << name;
    }
    EXPECT_TRUE(graph::Verify(g).ok());
    return g;
  }
  // Three runs of the plan on inputs x [tokens, k] and h [tokens, n] of seeds 1-3, each output
  // named in `tolerance` within its relative error of the interpreter's.
  void ExpectNearInterpreter(test::GpuRunner& gpu, const graph::Graph& g, const test::RandomParams& params,
                             int64_t tokens, int64_t k, int64_t n, const std::map<std::string, double>& tolerance) {
    for (uint32_t seed : {1u, 2u, 3u}) {
      const std::map<std::string, Tensor> inputs = {{"x", RandomRows(tokens, k, seed)}, {"h", RandomRows(tokens, n, seed + 10)}};
      auto got = gpu.Run(inputs, 0);
      ASSERT_TRUE(got.ok()) << got.status();
      auto want = graph::Interpreter(params).Run(g, inputs, 0);
      ASSERT_TRUE(want.ok()) << want.status();
      for (const auto& [name, bound] : tolerance) {
        EXPECT_LE(test::RelativeError(got->at(name).f, want->at(name).f), bound) << name << " k" << k << " n" << n;
      }
    }
  }
  void ExpectFusedArgmax(const graph::Graph& g, const test::RandomParams& params, int64_t tokens, int64_t bucket,
                         const std::vector<Tensor>& xs) {
    auto gpu = test::GpuRunner::Create(ctx(), g, bucket, params);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    ASSERT_EQ((*gpu)->plan().dispatches().size(), 1u) << "an argmax dispatch of its own";
    EXPECT_NE((*gpu)->plan().dispatches()[0].variant.find("+argmax"), std::string::npos);
    for (const Tensor& x : xs) {
      auto got = (*gpu)->Run({{"x", x}}, 0);
      ASSERT_TRUE(got.ok()) << got.status();
      auto want = graph::Interpreter(params).Run(g, {{"x", x}}, 0);
      ASSERT_TRUE(want.ok()) << want.status();
      const std::vector<float>& logits = got->at("logits").f;
      EXPECT_LE(test::RelativeError(logits, want->at("logits").f), 2e-5);
      const int64_t n = static_cast<int64_t>(logits.size()) / tokens;
      ASSERT_EQ(got->at("next").i.size(), static_cast<size_t>(tokens));
      for (int64_t t = 0; t < tokens; ++t) {
        const float* row = &logits[static_cast<size_t>(t * n)];
        // The first maximum of the logits the kernel wrote, and the interpreter's choice.
        EXPECT_EQ(got->at("next").i[static_cast<size_t>(t)], std::max_element(row, row + n) - row) << "row " << t;
        EXPECT_EQ(got->at("next").i[static_cast<size_t>(t)], want->at("next").i[static_cast<size_t>(t)]) << "row " << t;
      }
    }
  }
};

TEST_F(FusedArgmaxTest, TheMatmulWritesTheFirstMaximum) {
  for (auto [dtype, k, n] : {std::tuple{DType::kQ6_K, int64_t{512}, int64_t{20011}}, std::tuple{DType::kQ4_K, int64_t{256}, int64_t{777}}}) {
    graph::Graph g = LmHead(dtype, k, n);
    test::RandomParams params(g, 12);
    ExpectFusedArgmax(g, params, 1, 1, {RandomRows(1, k, 1), RandomRows(1, k, 2), RandomRows(1, k, 3)});
    ExpectFusedArgmax(g, params, 3, 4, {RandomRows(3, k, 4), RandomRows(3, k, 5), RandomRows(3, k, 6)});
    // 13 rows of a 16-row bucket, one block of rows (each row's maximum kept apart).
    ExpectFusedArgmax(g, params, 13, 16, {RandomRows(13, k, 7), RandomRows(13, k, 8)});
  }
}

TEST_F(FusedArgmaxTest, TiesGoToTheLowerColumnAcrossWorkgroups) {
  // Q8_0 rows of one quant value each (d = 1): with x all ones (rounded exactly to 127 · d), row r's
  // logit is 64 · q_r · 127 · d, so rows of equal q tie exactly; 1,000 and 2,500 hold the largest.
  const int64_t k = 64, n = 3000;
  graph::Graph g = LmHead(DType::kQ8_0, k, n);
  std::vector<uint8_t> bytes;
  std::vector<float> values;
  for (int64_t r = 0; r < n; ++r) {
    const int8_t q = r == 1000 || r == 2500 ? 120 : static_cast<int8_t>((r * 37) % 100 - 50);
    for (int b = 0; b < 2; ++b) {
      bytes.push_back(0x00);  // f16 1.0
      bytes.push_back(0x3C);
      for (int i = 0; i < 32; ++i) bytes.push_back(static_cast<uint8_t>(q));
    }
    for (int64_t i = 0; i < k; ++i) values.push_back(static_cast<float>(q));
  }
  test::RandomParams params(g, 1);
  params.Set("w", bytes, values);
  ExpectFusedArgmax(g, params, 1, 1, {Tensor::F32({1, k}, std::vector<float>(k, 1.0f))});
}

// Gemma 3's post-norm, residual add and next pre-norm after a projection, computed by the q8
// matrix-vector kernel's last workgroup (fuse-residual-rmsnorm, then a tail in the matmul): one
// dispatch, the sum and the normalised sum as the interpreter's, three runs in a row.
TEST_F(FusedArgmaxTest, TheLastWorkgroupNormalisesTheRowsOfAMatmul) {
  for (auto [k, n, tokens, bucket] : {std::tuple{int64_t{512}, int64_t{1152}, int64_t{1}, int64_t{1}},
                                      std::tuple{int64_t{256}, int64_t{300}, int64_t{3}, int64_t{4}},
                                      std::tuple{int64_t{256}, int64_t{300}, int64_t{13}, int64_t{16}}}) {
    GraphBuilder b;
    ValueId o = b.MatMul(b.Input("x", Rows(k)), b.Param("w", Matrix(n, k, DType::kQ4_K)));
    ValueId post = b.RmsNorm(o, b.Param("g1", Vector(n)), 1e-6, 1.0);
    ValueId sum = b.Add(post, b.Input("h", Rows(n)));
    b.Output("sum", sum);
    b.Output("normed", b.RmsNorm(sum, b.Param("g2", Vector(n)), 1e-6, 1.0));
    const graph::Graph g = WithPasses(std::move(b), {"fuse-residual-rmsnorm", "q8-activations"});
    test::RandomParams params(g, 8);
    auto gpu = test::GpuRunner::Create(ctx(), g, bucket, params);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    ASSERT_EQ((*gpu)->plan().dispatches().size(), 1u) << "a norm dispatch of its own";
    EXPECT_NE((*gpu)->plan().dispatches()[0].variant.find("+rms_norm_tail"), std::string::npos);
    ExpectNearInterpreter(**gpu, g, params, tokens, k, n, {{"sum", 2e-5}, {"normed", 2e-5}});
  }
}

// A residual norm computed by the q8 matrix-vector kernel that reads its normalised sum (a norm in
// x: codegen/in_matmul.h): Gemma 3's post-norm, residual add and next pre-norm (a norm with a
// prologue), and a plain residual add and norm, before a gated projection. Two dispatches (the
// producer, then the consumer, whose workgroups all compute the rows and one writes the sum),
// against the interpreter; three runs in a row. Rows an invocation holds whole, and (4 rows of
// 2,560 values before 2,048 outputs, in workgroups of few invocations) rows it loads twice.
TEST_F(FusedArgmaxTest, TheConsumingMatmulComputesAResidualNorm) {
  for (auto [k, n, prologue, tokens, bucket, outputs] :
       {std::tuple{int64_t{512}, int64_t{1152}, true, int64_t{1}, int64_t{1}, int64_t{96}},
        std::tuple{int64_t{256}, int64_t{320}, true, int64_t{3}, int64_t{4}, int64_t{96}},
        std::tuple{int64_t{256}, int64_t{320}, true, int64_t{13}, int64_t{16}, int64_t{96}},
        std::tuple{int64_t{256}, int64_t{640}, false, int64_t{1}, int64_t{1}, int64_t{96}},
        std::tuple{int64_t{256}, int64_t{2560}, true, int64_t{4}, int64_t{4}, int64_t{2048}}}) {
    GraphBuilder b;
    ValueId o = b.MatMul(b.Input("x", Rows(k)), b.Param("w", Matrix(n, k, DType::kQ4_K)));
    ValueId post = prologue ? b.RmsNorm(o, b.Param("g1", Vector(n)), 1e-6, 1.0) : o;
    ValueId sum = b.Add(post, b.Input("h", Rows(n)));
    b.Output("sum", sum);
    ValueId normed = b.RmsNorm(sum, b.Param("g2", Vector(n)), 1e-5, prologue ? 1.0 : 0.0);
    b.Output("y", b.MatMulFused(normed, b.Param("up", Matrix(2 * outputs, n, DType::kQ8_0)), {}, "gelu_tanh_mul"));
    const graph::Graph g = WithPasses(std::move(b), {"fuse-residual-rmsnorm", "q8-activations"});
    test::RandomParams params(g, 5);
    auto gpu = test::GpuRunner::Create(ctx(), g, bucket, params);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    const auto& dispatches = (*gpu)->plan().dispatches();
    ASSERT_EQ(dispatches.size(), 2u) << "a norm dispatch of its own";
    EXPECT_EQ(dispatches[0].variant.find("+rms_norm_tail"), std::string::npos) << dispatches[0].variant;
    EXPECT_NE(dispatches[1].variant.find("+residual_norm_x"), std::string::npos) << dispatches[1].variant;
    // The kernel rounds s·g / d (1 / rms applied to the sums) where the interpreter rounds
    // s·g/rms / (d/rms), as with a norm prologue (Q8MatMulTest).
    ExpectNearInterpreter(**gpu, g, params, tokens, k, n, {{"sum", 2e-5}, {"y", 1e-3}});
  }
}

// The same in the float matrix-vector kernel (f16 and f32 weights), at one row of x: a plain
// residual add and norm before a projection; at a bucket of 4 the norm keeps its own dispatch.
TEST_F(FusedArgmaxTest, TheConsumingFloatMatmulComputesAResidualNorm) {
  for (auto [k, n, dtype] : {std::tuple{int64_t{256}, int64_t{320}, DType::kF16},
                             std::tuple{int64_t{512}, int64_t{1100}, DType::kF32},
                             std::tuple{int64_t{256}, int64_t{44}, DType::kBF16}}) {
    GraphBuilder b;
    ValueId o = b.MatMul(b.Input("x", Rows(k)), b.Param("w", Matrix(n, k, DType::kQ4_K)));
    ValueId sum = b.Add(o, b.Input("h", Rows(n)));
    b.Output("sum", sum);
    ValueId normed = b.RmsNorm(sum, b.Param("g2", Vector(n)), 1e-5, 0.0);
    b.Output("y", b.MatMul(normed, b.Param("proj", Matrix(72, n, dtype))));
    const graph::Graph g = WithPasses(std::move(b), {"fuse-residual-rmsnorm"});
    test::RandomParams params(g, 6);
    for (int64_t bucket : {1, 4}) {
      auto gpu = test::GpuRunner::Create(ctx(), g, bucket, params);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      const auto& dispatches = (*gpu)->plan().dispatches();
      ASSERT_EQ(dispatches.size(), bucket == 1 ? 2u : 3u) << graph::Name(dtype);
      EXPECT_EQ(dispatches.back().variant.find("+residual_norm_x") != std::string::npos, bucket == 1)
          << dispatches.back().variant;
      ExpectNearInterpreter(**gpu, g, params, 1, k, n, {{"sum", 2e-5}, {"y", 2e-5}});
    }
  }
}

// The LM head reading the step's last row itself (a last row in x: codegen/in_matmul.h) with its
// norm prologue, in the float and the q8 matrix-vector kernels: one dispatch (no copy of the row),
// the logits and the argmax as the interpreter's, for steps of 1, 3 and 4 rows of 4-row buckets
// and of 1 of a 1-row one; three inputs each.
TEST_F(FusedArgmaxTest, TheLmHeadReadsTheLastRowItself) {
  for (bool q8 : {false, true}) {
    const int64_t k = 512, n = 777;
    GraphBuilder b;
    ValueId last = b.LastRow(b.Input("x", Rows(k)));
    ValueId normed = b.RmsNorm(last, b.Param("g", Vector(k)), 1e-5, 0.0);
    ValueId logits = b.MatMul(normed, b.Param("w", Matrix(n, k, DType::kQ6_K)));
    b.Output("logits", logits);
    b.Output("next", b.Argmax(logits));
    std::vector<const char*> passes = {"fuse-norm-matmul"};
    if (q8) passes.push_back("q8-activations");
    const graph::Graph g = WithPasses(std::move(b), passes);
    test::RandomParams params(g, 9);
    for (auto [tokens, bucket] : {std::pair{int64_t{1}, int64_t{1}}, std::pair{int64_t{1}, int64_t{4}},
                                  std::pair{int64_t{3}, int64_t{4}}, std::pair{int64_t{4}, int64_t{4}}}) {
      auto gpu = test::GpuRunner::Create(ctx(), g, bucket, params);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      const auto& dispatches = (*gpu)->plan().dispatches();
      ASSERT_EQ(dispatches.size(), q8 ? 1u : 2u) << "a last_row dispatch of its own";
      EXPECT_NE(dispatches[0].variant.find("+last_row"), std::string::npos) << dispatches[0].variant;
      for (uint32_t seed : {1u, 2u, 3u}) {
        const std::map<std::string, Tensor> inputs = {{"x", RandomRows(tokens, k, seed)}};
        auto got = (*gpu)->Run(inputs, 0);
        ASSERT_TRUE(got.ok()) << got.status();
        auto want = graph::Interpreter(params).Run(g, inputs, 0);
        ASSERT_TRUE(want.ok()) << want.status();
        // q8: the kernel rounds x·g / d with 1 / rms applied to the sums (Q8MatMulTest).
        EXPECT_LE(test::RelativeError(got->at("logits").f, want->at("logits").f), q8 ? 1e-3 : 2e-5)
            << "q8 " << q8 << ", " << tokens << " of " << bucket;
        EXPECT_EQ(got->at("next").i, want->at("next").i) << "q8 " << q8 << ", " << tokens << " of " << bucket;
      }
    }
  }
}

class QuantEmbeddingTest : public QuantKernelTest, public ::testing::WithParamInterface<DType> {};

TEST_P(QuantEmbeddingTest, GathersExactlyTheDequantizedRows) {
  const DType dtype = GetParam();
  const int64_t cols = graph::Info(dtype).block_elems == 32 ? 96 : 512;
  GraphBuilder b;
  ValueId ids = b.Input("ids", {DType::kI32, {Dim::Tokens()}});
  b.Output("y", b.Embedding(b.Param("table", Matrix(37, cols, dtype)), ids));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  test::RandomParams params(*g, 5);
  const double err = WorstError(*g, params, 8,
                                {{{{"ids", Tensor::I32({5}, {36, 0, 17, 17, 3})}}, 0},
                                 {{{"ids", Tensor::I32({8}, {1, 2, 3, 4, 5, 6, 7, 8})}}, 0}});
  EXPECT_EQ(err, 0.0) << "the GPU's decoding differs from quant/'s";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, QuantEmbeddingTest,
                         ::testing::Values(DType::kQ8_0, DType::kQ5_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ4_0,
                                           DType::kQ4_1, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kIQ4_NL,
                                           DType::kIQ4_XS, DType::kMXFP4),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(graph::Name(i.param)); });

// ggml's quantization of the fixture matrix (quant/*.bin, 64 rows of 512 values, with edge rows:
// zeros, constants, outliers, tiny values), gathered on the GPU, equals ggml's own dequantization
// (quant/*_dequant_f32.npy) bit for bit.
class QuantFixtureKernelTest : public QuantKernelTest, public ::testing::WithParamInterface<std::pair<DType, const char*>> {};

TEST_P(QuantFixtureKernelTest, GpuDecodesGgmlBlocksBitExactly) {
  const auto [dtype, stem] = GetParam();
  const std::filesystem::path dir = test::FixturesDir() / "quant";
  const std::string file = test::ReadFileBytes(dir / (std::string(stem) + ".bin"));
  const std::vector<uint8_t> bytes(file.begin(), file.end());
  absl::StatusOr<test::NpyArray> ref = test::ReadNpy(dir / (std::string(stem) + "_dequant_f32.npy"));
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_EQ(ref->shape, (std::vector<int64_t>{64, 512}));
  ASSERT_EQ(bytes.size(), graph::ByteSize(dtype, 64 * 512));

  GraphBuilder b;
  ValueId ids = b.Input("ids", {DType::kI32, {Dim::Tokens()}});
  b.Output("y", b.Embedding(b.Param("table", Matrix(64, 512, dtype)), ids));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  test::RandomParams params(*g, 1);
  params.Set("table", bytes, ref->data);
  std::vector<int32_t> all(64);
  for (int32_t i = 0; i < 64; ++i) all[i] = i;
  auto gpu = test::GpuRunner::Create(ctx(), *g, 64, params);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto got = (*gpu)->Run({{"ids", Tensor::I32({64}, all)}}, 0);
  ASSERT_TRUE(got.ok()) << got.status();
  const std::vector<float>& y = got->at("y").f;
  ASSERT_EQ(y.size(), ref->data.size());
  size_t differing = 0;
  for (size_t i = 0; i < y.size(); ++i) differing += std::memcmp(&y[i], &ref->data[i], sizeof(float)) != 0;
  EXPECT_EQ(differing, 0u) << "of " << y.size() << " values";
}

INSTANTIATE_TEST_SUITE_P(Ggml, QuantFixtureKernelTest,
                         ::testing::Values(std::pair{DType::kQ8_0, "q8_0"}, std::pair{DType::kQ4_K, "q4_K"},
                                           std::pair{DType::kQ6_K, "q6_K"}),
                         [](const ::testing::TestParamInfo<std::pair<DType, const char*>>& i) {
                           return std::string(i.param.second);
                         });

// gguf-py's MXFP4 blocks of the fixture matrix (quant/types/mxfp4.bin, raw 17-byte blocks of 64
// rows of 512 values), gathered on the GPU: bit for bit gguf-py's dequantization.
TEST_F(QuantKernelTest, GpuDecodesMxfp4BlocksBitExactly) {
  const std::filesystem::path dir = test::FixturesDir() / "quant" / "types";
  const std::string file = test::ReadFileBytes(dir / "mxfp4.bin");
  const std::vector<uint8_t> bytes(file.begin(), file.end());
  absl::StatusOr<test::NpyArray> want = test::ReadNpy(dir / "mxfp4_dequant_f32.npy");
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_EQ(want->shape.size(), 2u);
  const int64_t rows = want->shape[0], cols = want->shape[1];
  ASSERT_EQ(bytes.size(), graph::ByteSize(DType::kMXFP4, rows * cols));
  GraphBuilder b;
  ValueId ids = b.Input("ids", {DType::kI32, {Dim::Tokens()}});
  b.Output("y", b.Embedding(b.Param("table", Matrix(rows, cols, DType::kMXFP4)), ids));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  test::RandomParams params(*g, 1);
  params.Set("table", bytes, want->data);
  std::vector<int32_t> all(static_cast<size_t>(rows));
  for (int32_t i = 0; i < rows; ++i) all[static_cast<size_t>(i)] = i;
  auto gpu = test::GpuRunner::Create(ctx(), *g, rows, params);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto got = (*gpu)->Run({{"ids", Tensor::I32({rows}, all)}}, 0);
  ASSERT_TRUE(got.ok()) << got.status();
  const std::vector<float>& y = got->at("y").f;
  ASSERT_EQ(y.size(), want->data.size());
  size_t differing = 0;
  for (size_t i = 0; i < y.size(); ++i) differing += std::memcmp(&y[i], &want->data[i], sizeof(float)) != 0;
  EXPECT_EQ(differing, 0u) << "of " << y.size() << " values";
}

// llama-quantize's blocks of every quant type users download (quant/types/: each tensor types.json
// lists, dequantized by gguf-py), gathered on the GPU: bit for bit gguf-py's values.
TEST_F(QuantKernelTest, GpuDecodesEveryGgufQuantTypeBitExactly) {
  const std::filesystem::path dir = test::FixturesDir() / "quant" / "types";
  const nlohmann::json index = test::ReadJsonFile(dir / "types.json");
  int checked = 0;
  for (const auto& [file, entry] : index.items()) {
    if (!entry.contains("dequantized")) continue;
    absl::StatusOr<std::unique_ptr<formats::GgufFile>> gguf = formats::GgufFile::Open(dir / file);
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    for (const auto& [type, ref] : entry["dequantized"].items()) {
      SCOPED_TRACE(ref["file"].get<std::string>());
      absl::StatusOr<formats::TensorView> t = (*gguf)->Get(ref["tensor"].get<std::string>());
      ASSERT_TRUE(t.ok()) << t.status();
      absl::StatusOr<test::NpyArray> want = test::ReadNpy(dir / ref["file"].get<std::string>());
      ASSERT_TRUE(want.ok()) << want.status();
      ASSERT_EQ(want->shape, t->shape);
      const int64_t rows = t->shape[0], cols = t->shape[1];
      GraphBuilder b;
      ValueId ids = b.Input("ids", {DType::kI32, {Dim::Tokens()}});
      b.Output("y", b.Embedding(b.Param("table", Matrix(rows, cols, t->dtype)), ids));
      auto g = std::move(b).Finish();
      ASSERT_TRUE(g.ok()) << g.status();
      test::RandomParams params(*g, 1);
      params.Set("table", std::vector<uint8_t>(t->data, t->data + t->nbytes), want->data);
      std::vector<int32_t> all(static_cast<size_t>(rows));
      for (int32_t i = 0; i < rows; ++i) all[static_cast<size_t>(i)] = i;
      auto gpu = test::GpuRunner::Create(ctx(), *g, rows, params);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      auto got = (*gpu)->Run({{"ids", Tensor::I32({rows}, all)}}, 0);
      ASSERT_TRUE(got.ok()) << got.status();
      const std::vector<float>& y = got->at("y").f;
      ASSERT_EQ(y.size(), want->data.size());
      size_t differing = 0;
      for (size_t i = 0; i < y.size(); ++i) differing += std::memcmp(&y[i], &want->data[i], sizeof(float)) != 0;
      EXPECT_EQ(differing, 0u) << "of " << y.size() << " values";
      ++checked;
    }
  }
  EXPECT_GE(checked, 9);
}

}  // namespace
}  // namespace doppler
