// Every GPU kernel against the interpreter on random inputs, at sizes that are not multiples of
// any workgroup or subgroup size, with steps smaller than the plan's token bucket and positions
// past zero.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "graph/builder.h"
#include "tests/support/gpu_runner.h"
#include "tests/support/vk_test_env.h"

namespace doppler {
namespace {

using graph::Dim;
using graph::DType;
using graph::GraphBuilder;
using graph::Tensor;
using graph::TensorType;
using graph::ValueId;

TensorType Rows(int64_t cols, DType dtype = DType::kF32) { return {dtype, {Dim::Tokens(), Dim::Static(cols)}}; }
TensorType Matrix(int64_t rows, int64_t cols, DType dtype) { return {dtype, {Dim::Static(rows), Dim::Static(cols)}}; }

Tensor RandomRows(int64_t tokens, int64_t cols, uint32_t seed) {
  return Tensor::F32({tokens, cols}, test::RandomFloats(static_cast<size_t>(tokens * cols), seed));
}

class KernelTest : public vk::VkTest {
 protected:
  // Runs `g` on both sides for each (inputs, pos) step and compares every output.
  void Compare(const graph::Graph& g, int64_t bucket, const std::vector<std::pair<std::map<std::string, Tensor>, uint32_t>>& steps,
               double tolerance) {
    test::RandomParams params(g, 1234);
    auto gpu = test::GpuRunner::Create(ctx(), g, bucket, params);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    graph::Interpreter interp(params);
    for (size_t s = 0; s < steps.size(); ++s) {
      auto want = interp.Run(g, steps[s].first, steps[s].second);
      ASSERT_TRUE(want.ok()) << want.status();
      auto got = (*gpu)->Run(steps[s].first, steps[s].second);
      ASSERT_TRUE(got.ok()) << got.status();
      for (const auto& [name, ref] : *want) {
        const Tensor& t = got->at(name);
        ASSERT_EQ(t.shape, ref.shape) << name;
        if (ref.dtype == DType::kI32) {
          EXPECT_EQ(t.i, ref.i) << name << " step " << s;
        } else {
          EXPECT_LE(test::RelativeError(t.f, ref.f), tolerance) << name << " step " << s;
        }
      }
    }
  }
};

class EmbeddingKernelTest : public KernelTest, public ::testing::WithParamInterface<DType> {};

TEST_P(EmbeddingKernelTest, GathersRows) {
  GraphBuilder b;
  ValueId ids = b.Input("ids", {DType::kI32, {Dim::Tokens()}});
  b.Output("y", b.Embedding(b.Param("table", Matrix(37, 77, GetParam())), ids));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  Compare(*g, 8, {{{{"ids", Tensor::I32({5}, {36, 0, 17, 17, 3})}}, 0}, {{{"ids", Tensor::I32({8}, {1, 2, 3, 4, 5, 6, 7, 8})}}, 0}}, 0.0);
}
INSTANTIATE_TEST_SUITE_P(Dtypes, EmbeddingKernelTest, ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(graph::Name(i.param)); });

struct MatMulCase {
  int64_t tokens, bucket, k, n;
  DType dtype;
};

void PrintTo(const MatMulCase& c, std::ostream* os) {
  *os << c.tokens << " tokens, k " << c.k << ", n " << c.n << ", " << graph::Name(c.dtype);
}

class MatMulKernelTest : public KernelTest, public ::testing::WithParamInterface<MatMulCase> {};

TEST_P(MatMulKernelTest, MatchesInterpreter) {
  const MatMulCase& c = GetParam();
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(c.k));
  b.Output("y", b.MatMul(x, b.Param("w", Matrix(c.n, c.k, c.dtype))));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  Compare(*g, c.bucket, {{{{"x", RandomRows(c.tokens, c.k, 1)}}, 0}, {{{"x", RandomRows(1, c.k, 2)}}, 3}}, 1e-5);
}
INSTANTIATE_TEST_SUITE_P(Shapes, MatMulKernelTest,
                         ::testing::Values(MatMulCase{1, 1, 131, 67, DType::kF32}, MatMulCase{1, 1, 131, 67, DType::kF16},
                                           MatMulCase{1, 1, 130, 5, DType::kBF16},
                                           MatMulCase{13, 16, 131, 67, DType::kF32},
                                           MatMulCase{13, 16, 200, 9, DType::kF16},
                                           MatMulCase{3, 20, 1000, 3, DType::kF16}),
                         [](const ::testing::TestParamInfo<MatMulCase>& i) {
                           const MatMulCase& c = i.param;
                           return "t" + std::to_string(c.tokens) + "_k" + std::to_string(c.k) + "_n" +
                                  std::to_string(c.n) + "_" + graph::Name(c.dtype);
                         });

TEST_F(KernelTest, MatMulOnAStaticRow) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(45));
  b.Output("y", b.MatMul(b.LastRow(x), b.Param("w", Matrix(19, 45, DType::kF16))));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  Compare(*g, 8, {{{{"x", RandomRows(6, 45, 5)}}, 0}}, 1e-5);
}

TEST_F(KernelTest, ElementwiseOps) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(101));
  ValueId y = b.Input("y", Rows(101));
  b.Output("add", b.Add(x, y));
  b.Output("mul", b.Mul(x, y));
  b.Output("silu", b.Silu(x));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  Tensor xs = RandomRows(9, 101, 7), ys = RandomRows(9, 101, 8);
  for (float& v : xs.f) v *= 20.0f;  // silu's tails
  Compare(*g, 12, {{{{"x", xs}, {"y", ys}}, 0}}, 1e-6);
}

class RmsNormKernelTest : public KernelTest, public ::testing::WithParamInterface<double> {};

TEST_P(RmsNormKernelTest, NormalisesRows) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(333));
  b.Output("y", b.RmsNorm(x, b.Param("w", {DType::kF32, {Dim::Static(333)}}), 1e-5, GetParam()));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  Compare(*g, 4, {{{{"x", RandomRows(3, 333, 9)}}, 0}}, 1e-5);
}
INSTANTIATE_TEST_SUITE_P(WeightOffsets, RmsNormKernelTest, ::testing::Values(0.0, 1.0),
                         [](const ::testing::TestParamInfo<double>& i) { return "offset" + std::to_string(i.index); });

class RopeKernelTest : public KernelTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(RopeKernelTest, RotatesPairsAtRuntimePositions) {
  const int64_t heads = 3, head_dim = 10, positions = 20;
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(heads * head_dim));
  auto table = std::make_shared<std::vector<float>>(test::RandomFloats(positions * head_dim, 11));
  ValueId t = b.Const("table", {DType::kF32, {Dim::Static(positions), Dim::Static(head_dim / 2), Dim::Static(2)}}, table);
  b.Output("y", b.Rope(x, t, heads, head_dim, GetParam()));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  Compare(*g, 8, {{{{"x", RandomRows(5, heads * head_dim, 12)}}, 7}, {{{"x", RandomRows(8, heads * head_dim, 13)}}, 12}},
          1e-6);
}
INSTANTIATE_TEST_SUITE_P(Styles, RopeKernelTest, ::testing::Values("neox", "interleaved"));

struct AttentionCase {
  int64_t heads, kv_heads, head_dim, window;
  DType cache;
};

void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << c.heads << "/" << c.kv_heads << " heads, head_dim " << c.head_dim << ", window " << c.window << ", "
      << graph::Name(c.cache) << " cache";
}

class AttentionKernelTest : public KernelTest, public ::testing::WithParamInterface<AttentionCase> {};

// Cache writes then attention over a prefill of 70 tokens (more keys than a workgroup visits at
// once), then decode steps that read everything written before.
TEST_P(AttentionKernelTest, CausalAttentionOverTheCache) {
  const AttentionCase& c = GetParam();
  const int64_t capacity = 90, kv_width = c.kv_heads * c.head_dim, q_width = c.heads * c.head_dim;
  GraphBuilder b;
  ValueId q = b.Input("q", Rows(q_width));
  ValueId k = b.Input("k", Rows(kv_width));
  ValueId v = b.Input("v", Rows(kv_width));
  TensorType cache{c.cache, {Dim::Static(capacity), Dim::Static(kv_width)}};
  ValueId kc = b.CacheWrite(b.State("k_cache", cache), k);
  ValueId vc = b.CacheWrite(b.State("v_cache", cache), v);
  b.Output("o", b.Attention(q, kc, vc, c.heads, c.kv_heads, c.head_dim, 1.0 / std::sqrt(c.head_dim), c.window));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  auto step = [&](int64_t tokens, uint32_t seed) {
    return std::map<std::string, Tensor>{{"q", RandomRows(tokens, q_width, seed)},
                                         {"k", RandomRows(tokens, kv_width, seed + 1)},
                                         {"v", RandomRows(tokens, kv_width, seed + 2)}};
  };
  Compare(*g, 80, {{step(70, 20), 0}, {step(1, 30), 70}, {step(3, 40), 71}}, 2e-5);
}
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionKernelTest,
                         ::testing::Values(AttentionCase{6, 2, 20, 0, DType::kF32}, AttentionCase{6, 2, 20, 0, DType::kF16},
                                           AttentionCase{4, 1, 72, 0, DType::kF16},
                                           AttentionCase{3, 3, 18, 5, DType::kF32},
                                           AttentionCase{4, 2, 8, 67, DType::kF16}),
                         [](const ::testing::TestParamInfo<AttentionCase>& i) {
                           const AttentionCase& c = i.param;
                           return "h" + std::to_string(c.heads) + "_kv" + std::to_string(c.kv_heads) + "_d" +
                                  std::to_string(c.head_dim) + "_w" + std::to_string(c.window) + "_" +
                                  graph::Name(c.cache);
                         });

TEST_F(KernelTest, ArgmaxTakesTheFirstMaximum) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(1000));
  b.Output("ids", b.Argmax(x));
  b.Output("last", b.Argmax(b.LastRow(x)));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  Tensor xs = RandomRows(7, 1000, 50);
  xs.f[1 * 1000 + 999] = 5.0f;  // row 1: the maximum is the last column
  xs.f[2 * 1000 + 513] = 5.0f;  // row 2: a tie, the lower index wins
  xs.f[2 * 1000 + 258] = 5.0f;
  xs.f[6 * 1000 + 0] = 5.0f;    // the last row: the first column
  Compare(*g, 9, {{{{"x", xs}}, 0}}, 0.0);
}

}  // namespace
}  // namespace doppler
