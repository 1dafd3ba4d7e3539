// Every GPU kernel against the interpreter on random inputs, at sizes that are not multiples of
// any workgroup or subgroup size, with steps smaller than the plan's token bucket and positions
// past zero.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "codegen/attention_coop_online.h"
#include "codegen/kernel.h"
#include "graph/builder.h"
#include "graph/printer.h"
#include "passes/pass.h"
#include "tests/support/compiled_kernel.h"
#include "tests/support/gpu_runner.h"
#include "tests/support/graph_values.h"
#include "tests/support/scoped_tune.h"
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



class KernelTest : public vk::VkTest {
 protected:
  // Runs `g` on both sides for each (inputs, pos) step and compares every output.
  void Compare(const graph::Graph& g, int64_t bucket, const std::vector<std::pair<std::map<std::string, Tensor>, uint32_t>>& steps,
               double tolerance, std::optional<codegen::TargetCaps> caps = std::nullopt) {
    test::RandomParams params(g, 1234);
    auto gpu = test::GpuRunner::Create(ctx(), g, bucket, params, caps);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    graph::Interpreter interp(params);
    tolerance = test::ToleranceFor((*gpu)->plan(), tolerance);
    for (size_t s = 0; s < steps.size(); ++s) {
      auto want = interp.Run(g, steps[s].first, steps[s].second);
      ASSERT_TRUE(want.ok()) << want.status();
      auto got = (*gpu)->Run(steps[s].first, steps[s].second);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_NO_FATAL_FAILURE(test::ExpectOutputsMatch(*got, *want, tolerance, s));
    }
  }
  // Argmax of every row of xs, with and without subgroup arithmetic, exactly as the interpreter's.
  void CompareArgmax(const Tensor& xs) {
    GraphBuilder b;
    b.Output("ids", b.Argmax(b.Input("x", Rows(xs.shape[1]))));
    auto g = std::move(b).Finish();
    ASSERT_TRUE(g.ok()) << g.status();
    Compare(*g, xs.shape[0], {{{{"x", xs}}, 0}}, 0.0);
    Compare(*g, xs.shape[0], {{{{"x", xs}}, 0}}, 0.0, WithoutSubgroupArithmetic());
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

// With a factor (fuse-embedding-scale): the rows times it, as the interpreter scales them.
TEST_P(EmbeddingKernelTest, ScalesTheRowsItGathers) {
  GraphBuilder b;
  ValueId ids = b.Input("ids", {DType::kI32, {Dim::Tokens()}});
  b.Output("y", b.Scale(b.Embedding(b.Param("table", Matrix(37, 77, GetParam())), ids), 11.3137f));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<passes::PassManager> pm = passes::PassManager::Parse("fuse-embedding-scale,dce");
  ASSERT_TRUE(pm.ok()) << pm.status();
  graph::Graph fused = *g;
  ASSERT_TRUE(pm->Run(fused).ok());
  ASSERT_EQ(fused.node(*fused.output("y")).kind, graph::OpKind::kEmbedding) << graph::ToText(fused);
  Compare(fused, 8, {{{{"ids", Tensor::I32({5}, {36, 0, 17, 17, 3})}}, 0}}, 1e-6);
}
INSTANTIATE_TEST_SUITE_P(Dtypes, EmbeddingKernelTest, ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(graph::Name(i.param)); });

struct MatMulCase {
  int64_t tokens, bucket, k, n;
  DType dtype;
  const char* tune = "";  // DOPPLER_TUNE for the case, named by its variant below
  const char* variant = "";
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
  std::optional<test::ScopedTune> tune;
  if (*c.tune != '\0') tune.emplace(c.tune);
  Compare(*g, c.bucket, {{{{"x", RandomRows(c.tokens, c.k, 1)}}, 0}, {{{"x", RandomRows(1, c.k, 2)}}, 3}}, 1e-5);
}
INSTANTIATE_TEST_SUITE_P(Shapes, MatMulKernelTest,
                         ::testing::Values(MatMulCase{1, 1, 131, 67, DType::kF32}, MatMulCase{1, 1, 131, 67, DType::kF16},
                                           MatMulCase{1, 1, 130, 5, DType::kBF16},
                                           // One row of x, float parts of four values in
                                           // workgroups over a row's 16-byte loads.
                                           MatMulCase{1, 1, 1000, 37, DType::kF16},
                                           MatMulCase{1, 1, 2888, 19, DType::kBF16},
                                           // ... and in parts of eight (the rule's at more rows).
                                           MatMulCase{1, 1, 1000, 37, DType::kF16, "gemv.float_part=8", "_parts8"},
                                           MatMulCase{13, 16, 131, 67, DType::kF32},
                                           MatMulCase{13, 16, 200, 9, DType::kF16},
                                           MatMulCase{3, 20, 1000, 3, DType::kF16},
                                           // More columns than one grid row of workgroups holds.
                                           MatMulCase{1, 1, 16, 66000, DType::kF32},
                                           // Narrow workgroups, several parts per invocation, the
                                           // last round partly past the row's end.
                                           MatMulCase{1, 1, 800, 8192, DType::kF32},
                                           // x longer than the matrix-vector kernel stages at once.
                                           MatMulCase{2, 2, 5000, 7, DType::kF16},
                                           // Tiled, with grids wide enough for tiles of 64 and 32
                                           // columns (narrower matrices take 16), K not a
                                           // multiple of the slice.
                                           MatMulCase{40, 64, 72, 8192, DType::kF32},
                                           MatMulCase{33, 64, 200, 4096, DType::kF32}),
                         [](const ::testing::TestParamInfo<MatMulCase>& i) {
                           const MatMulCase& c = i.param;
                           return "t" + std::to_string(c.tokens) + "_k" + std::to_string(c.k) + "_n" +
                                  std::to_string(c.n) + "_" + graph::Name(c.dtype) + c.variant;
                         });

// The tiled kernel's width follows the grid (where shared memory allows), and its K-slices the
// shared memory: 32 values where they fit, 16 in Vulkan's minimum of 16 KiB. Both compile (slices
// of 32 run above).
TEST(GemmKernel, WidthFollowsTheGridAndSlicesTheSharedMemory) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(256));
  b.Output("wide", b.MatMul(x, b.Param("w_wide", Matrix(8192, 256, DType::kQ4_K))));
  b.Output("mid", b.MatMul(x, b.Param("w_mid", Matrix(4096, 256, DType::kQ8_0))));
  b.Output("gated", b.MatMulWithNorm(x, b.Param("gamma", Vector(256, DType::kF32)), 1e-6, 0.0,
                                     b.Param("w_gated", Matrix(512, 256, DType::kQ6_K)), {}, "silu_mul"));
  b.Output("gated_mid", b.MatMulFused(x, b.Param("w_gated_mid", Matrix(8192, 256, DType::kQ4_K)), {}, "silu_mul"));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  for (const uint32_t shared_memory : {32768u, 16384u}) {
    codegen::TargetCaps caps;
    caps.max_shared_memory = shared_memory;
    std::vector<std::string> variants;
    for (const graph::Node& n : g->nodes()) {
      if (n.kind != graph::OpKind::kMatMul) continue;
      absl::StatusOr<test::CompiledKernel> compiled = test::EmitAndCompile(*g, n, caps, 64);
      ASSERT_TRUE(compiled.ok()) << compiled.status();
      variants.push_back(compiled->kernel.variant);
    }
    const std::string k = shared_memory == 32768u ? ".k32" : ".k16";
    // A gated matrix of 4,096 columns: 32-column tiles with slices of 16 in 32 KiB; in 16 KiB their
    // groups' sums do not fit, and it keeps 64-column tiles.
    EXPECT_EQ(variants,
              (std::vector<std::string>{"gemm.q4_k.tile64x64" + k, "gemm.q8_0.tile64x32" + k,
                                        "gemm.q6_k.tile64x16" + k + "+rms_norm+silu_mul",
                                        shared_memory == 32768u ? "gemm.q4_k.tile64x32.k16+silu_mul"
                                                                : "gemm.q4_k.tile64x64.k16+silu_mul"}));
  }
}

// A device without subgroup arithmetic gets a matrix-vector kernel that reduces in shared memory.
TEST_F(KernelTest, MatMulWithoutSubgroupArithmetic) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(200));
  b.Output("y", b.MatMul(x, b.Param("w", Matrix(37, 200, DType::kF16))));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  Compare(*g, 2, {{{{"x", RandomRows(2, 200, 1)}}, 0}, {{{"x", RandomRows(1, 200, 2)}}, 4}}, 1e-5,
          WithoutSubgroupArithmetic());
}

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

struct RopePrologueCase {
  std::string style;
  DType cache;
  bool head_norm;  // q and k normalised per head first (fuse-head-norm's form)
};

class RopePrologueTest : public KernelTest, public ::testing::WithParamInterface<RopePrologueCase> {};

// fuse-rope's forms: the k cache write and attention rotate k and q themselves (GQA, a prefill,
// then decode steps at later positions).
TEST_P(RopePrologueTest, CacheWriteAndAttentionRotateAsTheyLoad) {
  const int64_t heads = 4, kv_heads = 2, head_dim = 16, positions = 40, capacity = 32;
  GraphBuilder b;
  ValueId q = b.Input("q", Rows(heads * head_dim));
  ValueId k = b.Input("k", Rows(kv_heads * head_dim));
  ValueId v = b.Input("v", Rows(kv_heads * head_dim));
  auto values = std::make_shared<std::vector<float>>(test::RandomFloats(positions * head_dim, 11));
  ValueId table = b.Const("table", {DType::kF32, {Dim::Static(positions), Dim::Static(head_dim / 2), Dim::Static(2)}}, values);
  TensorType cache{GetParam().cache, {Dim::Static(capacity), Dim::Static(kv_heads * head_dim)}};
  if (GetParam().head_norm) {
    q = b.GroupRmsNorm(q, b.Param("q_norm", {DType::kF32, {Dim::Static(head_dim)}}), head_dim, 1e-6, 1.0);
    k = b.GroupRmsNorm(k, b.Param("k_norm", {DType::kF32, {Dim::Static(head_dim)}}), head_dim, 1e-6, 1.0);
  }
  ValueId kc = b.CacheWrite(b.State("k_cache", cache), b.Rope(k, table, kv_heads, head_dim, GetParam().style));
  ValueId vc = b.CacheWrite(b.State("v_cache", cache), v);
  b.Output("o", b.Attention(b.Rope(q, table, heads, head_dim, GetParam().style), kc, vc, heads, kv_heads, head_dim,
                            0.3, 0));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<passes::PassManager> pm = passes::PassManager::Parse("fuse-rope,fuse-head-norm,dce");
  ASSERT_TRUE(pm.ok()) << pm.status();
  ASSERT_TRUE(pm->Run(*g).ok());
  int unfused = 0;
  for (const graph::Node& n : g->nodes()) {
    unfused += n.kind == graph::OpKind::kRope || n.kind == graph::OpKind::kRmsNorm ? 1 : 0;
  }
  ASSERT_EQ(unfused, 0) << graph::ToText(*g);
  auto step = [&](int64_t tokens, uint32_t seed) {
    return std::map<std::string, Tensor>{{"q", RandomRows(tokens, heads * head_dim, seed)},
                                         {"k", RandomRows(tokens, kv_heads * head_dim, seed + 1)},
                                         {"v", RandomRows(tokens, kv_heads * head_dim, seed + 2)}};
  };
  // A 16-token bucket (prefill's block attention), a 64-token one (cooperative-matrix attention
  // where the device has it), and a 2-token one (decode's).
  Compare(*g, 16, {{step(13, 20), 0}, {step(1, 30), 13}, {step(5, 40), 14}}, 2e-5);
  Compare(*g, 64, {{step(13, 20), 0}, {step(1, 30), 13}, {step(5, 40), 14}}, 2e-5);
  Compare(*g, 2, {{step(2, 50), 0}, {step(1, 60), 2}, {step(2, 70), 3}}, 2e-5);
}
INSTANTIATE_TEST_SUITE_P(Forms, RopePrologueTest,
                         ::testing::Values(RopePrologueCase{"neox", DType::kF32, false},
                                           RopePrologueCase{"neox", DType::kF16, false},
                                           RopePrologueCase{"interleaved", DType::kF16, false},
                                           RopePrologueCase{"neox", DType::kF16, true},
                                           RopePrologueCase{"interleaved", DType::kF32, true}),
                         [](const ::testing::TestParamInfo<RopePrologueCase>& i) {
                           return i.param.style + "_" + graph::Name(i.param.cache) + (i.param.head_norm ? "_head_norm" : "");
                         });

// The subgroups variant's keys split over up to 3 workgroups a (head, row), runs of at least 2
// keys (3 runs from 5 keys on), whatever the rule would choose for the device.
constexpr const char* kThreeRuns = "attention.splits=3,attention.split_keys=2";

struct AppendCase {
  int64_t heads, kv_heads, head_dim, window, capacity;
  DType cache;
  std::string style;  // "" for no rope
  bool head_norm;     // q and k normalised per head first
  int steps = 40;     // one-token decode steps
};

class AppendingAttentionTest : public KernelTest, public ::testing::WithParamInterface<AppendCase> {};

// fuse-kv-append's form: attention writes the step's keys and values (rotated and normalised as the
// k cache write did) and attends. Decode steps of one token run it as one kernel; larger buckets,
// and devices without subgroup arithmetic, as the cache writes and then attention.
TEST_P(AppendingAttentionTest, WritesTheNewKeysThenAttends) {
  const AppendCase& c = GetParam();
  const int64_t q_width = c.heads * c.head_dim, kv_width = c.kv_heads * c.head_dim, positions = 64;
  GraphBuilder b;
  ValueId q = b.Input("q", Rows(q_width));
  ValueId k = b.Input("k", Rows(kv_width));
  ValueId v = b.Input("v", Rows(kv_width));
  TensorType cache{c.cache, {Dim::Static(c.capacity), Dim::Static(kv_width)}};
  if (c.head_norm) {
    q = b.GroupRmsNorm(q, b.Param("q_norm", {DType::kF32, {Dim::Static(c.head_dim)}}), c.head_dim, 1e-6, 1.0);
    k = b.GroupRmsNorm(k, b.Param("k_norm", {DType::kF32, {Dim::Static(c.head_dim)}}), c.head_dim, 1e-5, 0.0);
  }
  if (!c.style.empty()) {
    auto values = std::make_shared<std::vector<float>>(test::RandomFloats(positions * c.head_dim, 11));
    ValueId table =
        b.Const("table", {DType::kF32, {Dim::Static(positions), Dim::Static(c.head_dim / 2), Dim::Static(2)}}, values);
    q = b.Rope(q, table, c.heads, c.head_dim, c.style);
    k = b.Rope(k, table, c.kv_heads, c.head_dim, c.style);
  }
  ValueId kc = b.CacheWrite(b.State("k_cache", cache), k);
  ValueId vc = b.CacheWrite(b.State("v_cache", cache), v);
  b.Output("o", b.Attention(q, kc, vc, c.heads, c.kv_heads, c.head_dim, 0.3, c.window));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<passes::PassManager> pm = passes::PassManager::Parse("fuse-rope,fuse-head-norm,fuse-kv-append,dce");
  ASSERT_TRUE(pm.ok()) << pm.status();
  ASSERT_TRUE(pm->Run(*g).ok());
  for (const graph::Node& n : g->nodes()) {
    ASSERT_TRUE(n.kind != graph::OpKind::kCacheWrite && n.kind != graph::OpKind::kRope && n.kind != graph::OpKind::kRmsNorm)
        << graph::ToText(*g);
    if (n.kind == graph::OpKind::kAttention) {
      ASSERT_EQ(n.attrs.Int("append"), 1);
    }
  }
  auto step = [&](int64_t tokens, uint32_t seed) {
    return std::map<std::string, Tensor>{{"q", RandomRows(tokens, q_width, seed)},
                                         {"k", RandomRows(tokens, kv_width, seed + 1)},
                                         {"v", RandomRows(tokens, kv_width, seed + 2)}};
  };
  // One token a step: the appending kernel (where the device has subgroup arithmetic), over
  // more positions than a small ring holds.
  std::vector<std::pair<std::map<std::string, Tensor>, uint32_t>> decode;
  for (uint32_t pos = 0; pos < static_cast<uint32_t>(c.steps); ++pos) decode.push_back({step(1, 100 + 3 * pos), pos});
  {
    test::RandomParams params(*g, 1234);
    auto runner = test::GpuRunner::Create(ctx(), *g, 1, params);
    ASSERT_TRUE(runner.ok()) << runner.status();
    const bool appends = vk::TargetCapsOf(ctx().info()).subgroup_arithmetic;
    EXPECT_EQ((*runner)->plan().dispatches().size(), appends ? 1u : 3u);
    if (appends) {
      EXPECT_NE((*runner)->plan().dispatches()[0].variant.find("+append"), std::string::npos);
    }
  }
  // A key normalised and rotated in another order than the interpreter's can round to the
  // neighbouring f16 value (a step of 4.9e-4 relative) in an f16 cache: a looser bound there (up
  // to 1.7e-4 seen, 256-wide heads with a head norm).
  const double tolerance = c.cache == DType::kF16 ? 2e-4 : 2e-5;
  Compare(*g, 1, decode, tolerance);
  Compare(*g, 1, {decode.begin(), decode.begin() + 12}, tolerance, WithoutSubgroupArithmetic());
  {
    // Contexts split over up to 3 workgroups a head: the step's own key and value in the last
    // run, the caches written by the first.
    test::ScopedTune split(kThreeRuns);
    Compare(*g, 1, decode, tolerance);
  }
  // A prefill bucket: the cache writes, then attention.
  Compare(*g, 16, {{step(7, 20), 0}, {step(1, 30), 7}, {step(5, 40), 8}}, tolerance);
}
INSTANTIATE_TEST_SUITE_P(
    Forms, AppendingAttentionTest,
    ::testing::Values(AppendCase{4, 2, 16, 0, 64, DType::kF16, "neox", false},
                      AppendCase{4, 2, 16, 0, 64, DType::kF32, "interleaved", true},
                      AppendCase{6, 2, 20, 0, 64, DType::kF16, "", false},
                      AppendCase{3, 3, 18, 0, 48, DType::kF32, "neox", false},
                      AppendCase{4, 1, 72, 0, 64, DType::kF16, "neox", true},
                      AppendCase{4, 2, 8, 5, 20, DType::kF16, "neox", false},  // a ring of 20 rows
                      AppendCase{2, 1, 256, 0, 48, DType::kF16, "neox", true},
                      // Contexts past one trip of the decode kernel's subgroups (128 keys on the
                      // H100 and lavapipe), with the step's own key in a later trip; one through a
                      // window over a ring.
                      AppendCase{4, 2, 16, 0, 320, DType::kF32, "", false, 300},
                      AppendCase{6, 3, 40, 150, 160, DType::kF32, "", false, 300}),
    [](const ::testing::TestParamInfo<AppendCase>& i) {
      const AppendCase& c = i.param;
      return absl::StrCat("h", c.heads, "_kv", c.kv_heads, "_d", c.head_dim, "_w", c.window, "_",
                          graph::Name(c.cache), "_", c.style.empty() ? "norope" : c.style, c.head_norm ? "_head_norm" : "",
                          c.steps == 40 ? "" : absl::StrCat("_steps", c.steps));
    });

struct AttentionCase {
  int64_t heads, kv_heads, head_dim, window;
  DType cache;
};

void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << c.heads << "/" << c.kv_heads << " heads, head_dim " << c.head_dim << ", window " << c.window << ", "
      << graph::Name(c.cache) << " cache";
}

// Inputs q, k, v (one step's rows), their cache writes into states of `capacity` rows, and
// attention over the caches as output "o".
struct CachedAttention {
  ValueId q, k, v, k_cache, v_cache;  // the caches after the writes
};
CachedAttention AddCachedAttention(GraphBuilder& b, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t window,
                                   DType cache_dtype, int64_t capacity) {
  const int64_t kv_width = kv_heads * head_dim;
  ValueId q = b.Input("q", Rows(heads * head_dim));
  ValueId k = b.Input("k", Rows(kv_width));
  ValueId v = b.Input("v", Rows(kv_width));
  TensorType cache{cache_dtype, {Dim::Static(capacity), Dim::Static(kv_width)}};
  ValueId kc = b.CacheWrite(b.State("k_cache", cache), k);
  ValueId vc = b.CacheWrite(b.State("v_cache", cache), v);
  b.Output("o", b.Attention(q, kc, vc, heads, kv_heads, head_dim, 1.0 / std::sqrt(head_dim), window));
  return {q, k, v, kc, vc};
}

class AttentionKernelTest : public KernelTest, public ::testing::WithParamInterface<AttentionCase> {};

// Cache writes then attention over a prefill of 70 tokens (more keys than a workgroup visits at
// once), then decode steps that read everything written before.
TEST_P(AttentionKernelTest, CausalAttentionOverTheCache) {
  const AttentionCase& c = GetParam();
  const int64_t capacity = 90, kv_width = c.kv_heads * c.head_dim, q_width = c.heads * c.head_dim;
  GraphBuilder b;
  AddCachedAttention(b, c.heads, c.kv_heads, c.head_dim, c.window, c.cache, capacity);
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  auto step = [&](int64_t tokens, uint32_t seed) {
    return std::map<std::string, Tensor>{{"q", RandomRows(tokens, q_width, seed)},
                                         {"k", RandomRows(tokens, kv_width, seed + 1)},
                                         {"v", RandomRows(tokens, kv_width, seed + 2)}};
  };
  // Where the 80-token bucket takes the cooperative-matrix variant: in one pass over the keys in
  // each chunk size, and in two.
  for (const char* tune : {"", "attention.coop_keys=16", "attention.coop_keys=64", "attention.coop_online=0"}) {
    test::ScopedTune scoped(tune);
    Compare(*g, 80, {{step(70, 20), 0}, {step(1, 30), 70}, {step(3, 40), 71}}, 2e-5);
    if (!vk::TargetCapsOf(ctx().info()).coop_matrix_nv) break;  // the other forms are the same kernels
  }
}
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionKernelTest,
                         ::testing::Values(AttentionCase{6, 2, 20, 0, DType::kF32}, AttentionCase{6, 2, 20, 0, DType::kF16},
                                           AttentionCase{4, 1, 72, 0, DType::kF16},
                                           AttentionCase{3, 3, 18, 5, DType::kF32},
                                           AttentionCase{4, 2, 8, 67, DType::kF16},
                                           // Head sizes the cooperative-matrix variant takes.
                                           AttentionCase{4, 2, 64, 0, DType::kF16},
                                           AttentionCase{2, 1, 128, 50, DType::kF16},
                                           AttentionCase{2, 1, 256, 0, DType::kF16}),
                         [](const ::testing::TestParamInfo<AttentionCase>& i) {
                           const AttentionCase& c = i.param;
                           return "h" + std::to_string(c.heads) + "_kv" + std::to_string(c.kv_heads) + "_d" +
                                  std::to_string(c.head_dim) + "_w" + std::to_string(c.window) + "_" +
                                  graph::Name(c.cache);
                         });

struct DecodeAttentionCase {
  int64_t heads, kv_heads, head_dim, window;
  bool subgroup_arithmetic;
};

class DecodeAttentionTest : public KernelTest, public ::testing::WithParamInterface<DecodeAttentionCase> {};

// Decode-sized steps (a bucket of 2) over a cache of up to 300 keys: more than the decode
// kernel's subgroups take in one trip, so every subgroup keeps a running softmax over several,
// with and without subgroup arithmetic (the portable variant).
TEST_P(DecodeAttentionTest, StepsOfTwoTokensOverManyKeys) {
  const DecodeAttentionCase& c = GetParam();
  const int64_t capacity = 320, kv_width = c.kv_heads * c.head_dim, q_width = c.heads * c.head_dim;
  GraphBuilder b;
  AddCachedAttention(b, c.heads, c.kv_heads, c.head_dim, c.window, DType::kF16, capacity);
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<std::pair<std::map<std::string, Tensor>, uint32_t>> steps;
  for (uint32_t pos = 0, seed = 500; pos < 300; pos += 2, seed += 3) {
    steps.push_back({{{"q", RandomRows(2, q_width, seed)},
                      {"k", RandomRows(2, kv_width, seed + 1)},
                      {"v", RandomRows(2, kv_width, seed + 2)}},
                     pos});
  }
  codegen::TargetCaps caps = vk::TargetCapsOf(ctx().info());
  caps.subgroup_arithmetic = caps.subgroup_arithmetic && c.subgroup_arithmetic;
  Compare(*g, 2, steps, 2e-5, caps);
  // Each row's keys split over up to 16 workgroups of at least 7 keys (runs of 1 to 19 keys).
  test::ScopedTune split("attention.splits=16,attention.split_keys=7");
  Compare(*g, 2, steps, 2e-5, caps);
}
INSTANTIATE_TEST_SUITE_P(Shapes, DecodeAttentionTest,
                         ::testing::Values(DecodeAttentionCase{4, 1, 256, 0, true}, DecodeAttentionCase{8, 2, 64, 0, true},
                                           DecodeAttentionCase{6, 3, 40, 100, true},
                                           DecodeAttentionCase{4, 2, 72, 0, false}),
                         [](const ::testing::TestParamInfo<DecodeAttentionCase>& i) {
                           const DecodeAttentionCase& c = i.param;
                           return absl::StrCat("h", c.heads, "_kv", c.kv_heads, "_d", c.head_dim, "_w", c.window,
                                               c.subgroup_arithmetic ? "_subgroups" : "_shared");
                         });

struct SinkCase {
  int64_t heads, kv_heads, head_dim, window, capacity;
  DType cache;
  bool append;  // fuse-rope and fuse-kv-append first: decode steps take the appending kernel
};

class AttentionSinksTest : public KernelTest, public ::testing::WithParamInterface<SinkCase> {};

// Each head's sink logit joins its softmaxes (GPT-OSS): a prefill bucket (the block variant, its
// steps shorter than the bucket), then one-token steps on the subgroups variant (appending where
// the passes made it) and on the portable one, over more keys than a workgroup takes at once.
TEST_P(AttentionSinksTest, EachHeadsSinkJoinsItsSoftmax) {
  const SinkCase& c = GetParam();
  const int64_t q_width = c.heads * c.head_dim, kv_width = c.kv_heads * c.head_dim, positions = 160;
  GraphBuilder b;
  ValueId q = b.Input("q", Rows(q_width));
  ValueId k = b.Input("k", Rows(kv_width));
  auto values = std::make_shared<std::vector<float>>(test::RandomFloats(positions * c.head_dim, 5));
  ValueId table =
      b.Const("table", {DType::kF32, {Dim::Static(positions), Dim::Static(c.head_dim / 2), Dim::Static(2)}}, values);
  TensorType cache{c.cache, {Dim::Static(c.capacity), Dim::Static(kv_width)}};
  ValueId kc = b.CacheWrite(b.State("k_cache", cache), b.Rope(k, table, c.kv_heads, c.head_dim, "neox"));
  ValueId vc = b.CacheWrite(b.State("v_cache", cache), b.Input("v", Rows(kv_width)));
  ValueId sinks = b.Param("sinks", {DType::kF32, {Dim::Static(c.heads)}});
  b.Output("o", b.Attention(b.Rope(q, table, c.heads, c.head_dim, "neox"), kc, vc, c.heads, c.kv_heads, c.head_dim,
                            1.0 / std::sqrt(c.head_dim), c.window, "attention", sinks));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<passes::PassManager> pm =
      passes::PassManager::Parse(c.append ? "fuse-rope,fuse-kv-append,dce" : "fuse-rope,dce");
  ASSERT_TRUE(pm.ok() && pm->Run(*g).ok());
  for (const graph::Node& n : g->nodes()) {
    if (n.kind != graph::OpKind::kAttention) continue;
    ASSERT_EQ(n.attrs.Int("sinks"), 1) << graph::ToText(*g);
    ASSERT_EQ(n.attrs.Int("append"), c.append ? 1 : 0) << graph::ToText(*g);
  }
  auto step = [&](int64_t tokens, uint32_t seed) {
    return std::map<std::string, Tensor>{{"q", RandomRows(tokens, q_width, seed)},
                                         {"k", RandomRows(tokens, kv_width, seed + 1)},
                                         {"v", RandomRows(tokens, kv_width, seed + 2)}};
  };
  const double tolerance = c.cache == DType::kF16 ? 2e-4 : 2e-5;
  Compare(*g, 80, {{step(70, 20), 0}, {step(1, 30), 70}, {step(3, 40), 71}}, tolerance);
  std::vector<std::pair<std::map<std::string, Tensor>, uint32_t>> decode;
  for (uint32_t pos = 0; pos < 150; ++pos) decode.push_back({step(1, 100 + 3 * pos), pos});
  {
    test::RandomParams params(*g, 1234);
    auto runner = test::GpuRunner::Create(ctx(), *g, 1, params);
    ASSERT_TRUE(runner.ok()) << runner.status();
    bool with_sinks = false;
    for (const auto& d : (*runner)->plan().dispatches()) with_sinks |= d.variant.find("+sinks") != std::string::npos;
    EXPECT_TRUE(with_sinks);
  }
  Compare(*g, 1, decode, tolerance);
  Compare(*g, 1, {decode.begin(), decode.begin() + 70}, tolerance, WithoutSubgroupArithmetic());
  // Runs merged with the sink once, over windows and whole contexts.
  test::ScopedTune split(kThreeRuns);
  Compare(*g, 1, decode, tolerance);
}
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionSinksTest,
                         ::testing::Values(SinkCase{4, 2, 32, 0, 160, DType::kF32, true},
                                           SinkCase{6, 3, 20, 9, 100, DType::kF16, false},
                                           SinkCase{6, 2, 40, 0, 160, DType::kF16, true},
                                           SinkCase{3, 1, 72, 13, 96, DType::kF32, true},
                                           // Head sizes the cooperative-matrix variant takes (f16 caches).
                                           SinkCase{4, 2, 32, 8, 100, DType::kF16, false},
                                           SinkCase{4, 1, 64, 0, 160, DType::kF16, false},
                                           SinkCase{4, 2, 32, 0, 160, DType::kF16, true},
                                           SinkCase{4, 2, 32, 8, 100, DType::kF16, true}),
                         [](const ::testing::TestParamInfo<SinkCase>& i) {
                           const SinkCase& c = i.param;
                           return absl::StrCat("h", c.heads, "_kv", c.kv_heads, "_d", c.head_dim, "_w", c.window, "_",
                                               graph::Name(c.cache), c.append ? "_append" : "");
                         });

// The cooperative-matrix attention compiles to SPIR-V on any machine (it runs only on devices with
// VK_NV_cooperative_matrix): head sizes from 16 to 256, plain and with rope and head norm
// prologues and sinks, with and without a window; in one pass over the keys where the device's f32
// fragments keep the mma layout (heads of at most 128, in each chunk size), else in two.
TEST(CoopAttention, KernelsCompileForNvidia) {
  struct Form {
    bool accumulators_mma;
    const char* tune;
  };
  int compiled = 0;
  for (int64_t head_dim : {16, 64, 128, 256}) {
    for (bool prologues : {false, true}) {
      const int64_t heads = 4, kv_heads = 2, positions = 64;
      GraphBuilder b;
      ValueId q = b.Input("q", Rows(heads * head_dim));
      auto values = std::make_shared<std::vector<float>>(test::RandomFloats(positions * head_dim, 3));
      ValueId table = b.Const("table", {DType::kF32, {Dim::Static(positions), Dim::Static(head_dim / 2), Dim::Static(2)}}, values);
      TensorType cache{DType::kF16, {Dim::Static(positions), Dim::Static(kv_heads * head_dim)}};
      ValueId kc = b.CacheWrite(b.State("k_cache", cache), b.Input("k", Rows(kv_heads * head_dim)));
      ValueId vc = b.CacheWrite(b.State("v_cache", cache), b.Input("v", Rows(kv_heads * head_dim)));
      if (prologues) {
        q = b.Rope(b.GroupRmsNorm(q, b.Param("qn", {DType::kF32, {Dim::Static(head_dim)}}), head_dim, 1e-6, 1.0), table,
                   heads, head_dim, "neox");
      }
      ValueId sinks = prologues ? b.Param("sinks", {DType::kF32, {Dim::Static(heads)}}) : -1;
      b.Output("o", b.Attention(q, kc, vc, heads, kv_heads, head_dim, 0.125, prologues ? 40 : 0, "attention", sinks));
      auto g = std::move(b).Finish();
      ASSERT_TRUE(g.ok()) << g.status();
      absl::StatusOr<passes::PassManager> pm = passes::PassManager::Parse("fuse-rope,fuse-head-norm,dce");
      ASSERT_TRUE(pm.ok() && pm->Run(*g).ok());
      for (const graph::Node& n : g->nodes()) {
        if (n.kind != graph::OpKind::kAttention) continue;
        EXPECT_EQ(n.inputs.size(), prologues ? 6u : 3u);
        for (const Form form : {Form{false, ""}, Form{true, ""}, Form{true, "attention.coop_keys=16"},
                                Form{true, "attention.coop_keys=64"}, Form{true, "attention.coop_online=0"}}) {
          test::ScopedTune tune(form.tune);
          codegen::TargetCaps caps = test::NvidiaCoopCaps();
          caps.subgroup_shuffle = true;
          caps.coop_accumulators_mma = form.accumulators_mma;
          absl::StatusOr<test::CompiledKernel> kernel = test::EmitAndCompile(*g, n, caps, 128);
          ASSERT_TRUE(kernel.ok()) << form.tune << ": " << kernel.status();
          const bool online = form.accumulators_mma && head_dim <= codegen::kCoopOnlineMaxHeadDim &&
                              std::string(form.tune) != "attention.coop_online=0";
          const std::string& variant = kernel->kernel.variant;
          ASSERT_EQ(variant.rfind("coop.", 0), 0u) << variant;
          EXPECT_EQ(variant.rfind("coop.online.k", 0) == 0, online) << variant;
          EXPECT_EQ(variant.find("+sinks") != std::string::npos, prologues) << variant;
          EXPECT_EQ(kernel->spirv.bindings.size(), kernel->kernel.args.size() + 1);
          ++compiled;
        }
      }
    }
  }
  EXPECT_EQ(compiled, 40);
}

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
  Compare(*g, 9, {{{{"x", xs}}, 0}}, 0.0, WithoutSubgroupArithmetic());  // the shared-memory tree
}

// Rows longer than one round of the scan's loads (8 per invocation): maxima and ties in late rounds.
TEST_F(KernelTest, ArgmaxOverLongRows) {
  Tensor xs = RandomRows(3, 20001, 51);
  xs.f[0 * 20001 + 20000] = 7.0f;  // the last column
  xs.f[1 * 20001 + 17000] = 7.0f;  // a tie across rounds: the lower index wins
  xs.f[1 * 20001 + 19999] = 7.0f;
  xs.f[2 * 20001 + 9000] = 7.0f;
  CompareArgmax(xs);
}

// Rows whose length is a multiple of 4 are scanned a quad at a time: maxima and ties within a
// quad, across quads of one round and across rounds (past 8 quads per invocation of the widest
// workgroup), and a row whose values are all -inf.
TEST_F(KernelTest, ArgmaxOverQuads) {
  Tensor xs = RandomRows(5, 40000, 52);
  xs.f[0 * 40000 + 39999] = 7.0f;  // the last column
  xs.f[1 * 40000 + 34002] = 7.0f;  // ties within a quad and in a later round: the lowest wins
  xs.f[1 * 40000 + 34001] = 7.0f;
  xs.f[1 * 40000 + 39000] = 7.0f;
  xs.f[2 * 40000 + 3] = 7.0f;      // the last lane of the first quad
  xs.f[2 * 40000 + 4099] = 7.0f;
  for (int64_t i = 0; i < 40000; ++i) xs.f[static_cast<size_t>(3 * 40000 + i)] = -std::numeric_limits<float>::infinity();
  xs.f[4 * 40000 + 12345] = 7.0f;
  CompareArgmax(xs);
}

TEST_F(KernelTest, GeluTanhScaleAndRowBroadcast) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(101));
  ValueId bias = b.Param("bias", {DType::kF32, {Dim::Static(101)}});
  b.Output("gelu_tanh", b.GeluTanh(x));
  b.Output("scale", b.Scale(x, std::sqrt(128.0)));
  b.Output("add_bias", b.Add(x, bias));
  b.Output("mul_row", b.Mul(x, bias));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  Tensor xs = RandomRows(9, 101, 60);
  for (float& v : xs.f) v *= 12.0f;  // gelu's tails, where tanh saturates
  xs.f[3] = 60.0f;
  xs.f[4] = -60.0f;
  Compare(*g, 12, {{{{"x", xs}}, 0}, {{{"x", RandomRows(1, 101, 61)}}, 5}}, 2e-6);
}

TEST_F(KernelTest, ElementwiseRejectsMismatchedOperands) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(10));
  b.Add(x, b.Param("bias", {DType::kF32, {Dim::Static(9)}}), "bad_bias");
  EXPECT_NE(b.status().message().find("bad_bias"), std::string::npos) << b.status();
}

struct GroupNormCase {
  int64_t groups, group;
  double offset;
};

class GroupRmsNormKernelTest : public KernelTest, public ::testing::WithParamInterface<GroupNormCase> {};

// Per-head RMSNorm: each group of `group` values of a row is normalised on its own, with one
// weight vector [group] shared by the groups.
TEST_P(GroupRmsNormKernelTest, NormalisesEachGroup) {
  const GroupNormCase& c = GetParam();
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(c.groups * c.group));
  b.Output("y", b.GroupRmsNorm(x, b.Param("w", {DType::kF32, {Dim::Static(c.group)}}), c.group, 1e-6, c.offset));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  Tensor xs = RandomRows(5, c.groups * c.group, 70);
  for (int64_t i = 0; i < c.group; ++i) xs.f[static_cast<size_t>(c.group + i)] *= 100.0f;  // one loud group
  Compare(*g, 7, {{{{"x", xs}}, 0}, {{{"x", RandomRows(1, c.groups * c.group, 71)}}, 9}}, 1e-5);
}
INSTANTIATE_TEST_SUITE_P(Groups, GroupRmsNormKernelTest,
                         ::testing::Values(GroupNormCase{3, 48, 0.0}, GroupNormCase{1, 64, 1.0},
                                           GroupNormCase{5, 7, 1.0}, GroupNormCase{2, 130, 0.0}),
                         [](const ::testing::TestParamInfo<GroupNormCase>& i) {
                           return absl::StrCat("g", i.param.groups, "x", i.param.group, "_off",
                                               static_cast<int>(i.param.offset));
                         });

TEST(GroupRmsNorm, TypeChecksTheGroup) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(96));
  b.GroupRmsNorm(x, b.Param("w", {DType::kF32, {Dim::Static(40)}}), 40, 1e-6, 0.0, "bad_group");
  EXPECT_NE(b.status().message().find("group 40 must be a positive divisor of the width 96"), std::string::npos)
      << b.status();
  GraphBuilder b2;
  ValueId x2 = b2.Input("x", Rows(96));
  b2.GroupRmsNorm(x2, b2.Param("w", {DType::kF32, {Dim::Static(96)}}), 48, 1e-6, 0.0, "bad_weight");
  EXPECT_NE(b2.status().message().find("weight must be a float vector of the group size 48"), std::string::npos)
      << b2.status();
}

struct RingCase {
  int64_t heads, kv_heads, head_dim, window, bucket;
  DType cache;
  // Beside a global attention over a cache of its own: layers that differ in window and cache rows
  // share one kernel, which reads them as params (codegen::Kernel::params).
  bool beside_global = false;
};

void PrintTo(const RingCase& c, std::ostream* os) {
  *os << c.heads << "/" << c.kv_heads << " heads, head_dim " << c.head_dim << ", window " << c.window << ", bucket "
      << c.bucket << ", " << graph::Name(c.cache) << " cache" << (c.beside_global ? ", beside a global attention" : "");
}

class RingCacheKernelTest : public KernelTest, public ::testing::WithParamInterface<RingCase> {};

// A sliding-window cache of window + bucket - 1 rows is a ring: steps of up to `bucket` tokens
// whose positions wrap around the capacity several times, full steps and single tokens, with
// the caches' contents (f32) and the attention output compared with the interpreter's.
TEST_P(RingCacheKernelTest, WindowedAttentionOverAWrappingCache) {
  const RingCase& c = GetParam();
  const int64_t capacity = c.window + c.bucket - 1, kv_width = c.kv_heads * c.head_dim, q_width = c.heads * c.head_dim;
  GraphBuilder b;
  const CachedAttention a = AddCachedAttention(b, c.heads, c.kv_heads, c.head_dim, c.window, c.cache, capacity);
  if (c.cache == DType::kF32) {
    b.Output("k_cache", a.k_cache);
    b.Output("v_cache", a.v_cache);
  }
  const int64_t positions = 4 * capacity + 2 * c.bucket;  // more than the steps below reach
  if (c.beside_global) {
    TensorType cache{c.cache, {Dim::Static(positions), Dim::Static(kv_width)}};
    ValueId gk = b.CacheWrite(b.State("global_k_cache", cache), a.k);
    ValueId gv = b.CacheWrite(b.State("global_v_cache", cache), a.v);
    b.Output("o_global", b.Attention(a.q, gk, gv, c.heads, c.kv_heads, c.head_dim, 1.0 / std::sqrt(c.head_dim), 0));
  }
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  if (c.beside_global) {  // in decode, one kernel, the windows and rows its params; compiled in elsewhere
    std::vector<codegen::Kernel> kernels;
    for (const graph::Node& n : g->nodes()) {
      if (n.kind != graph::OpKind::kAttention) continue;
      absl::StatusOr<codegen::Kernel> k = codegen::EmitKernel(*g, n, codegen::TargetCaps{}, c.bucket);
      ASSERT_TRUE(k.ok()) << k.status();
      kernels.push_back(*std::move(k));
    }
    ASSERT_EQ(kernels.size(), 2u);
    if (c.bucket == 1) {
      EXPECT_EQ(kernels[0].glsl, kernels[1].glsl);
      EXPECT_EQ(kernels[0].params, (std::vector<uint32_t>{static_cast<uint32_t>(c.window), static_cast<uint32_t>(capacity)}));
      EXPECT_EQ(kernels[1].params, (std::vector<uint32_t>{0u, static_cast<uint32_t>(positions)}));
    } else {
      EXPECT_NE(kernels[0].glsl, kernels[1].glsl);
      EXPECT_TRUE(kernels[0].params.empty() && kernels[1].params.empty());
    }
  }
  std::vector<std::pair<std::map<std::string, Tensor>, uint32_t>> steps;
  uint32_t pos = 0, seed = 80;
  // Full buckets, partial ones and single tokens, until the positions wrap 3 times.
  const std::vector<int64_t> pattern = {c.bucket, 1, c.bucket - 1, c.bucket, 2, 1, c.bucket, 3};
  for (size_t i = 0; pos <= 3 * capacity; ++i) {
    const int64_t tokens = std::max<int64_t>(1, std::min(pattern[i % pattern.size()], c.bucket));
    steps.push_back({{{"q", RandomRows(tokens, q_width, seed)},
                      {"k", RandomRows(tokens, kv_width, seed + 1)},
                      {"v", RandomRows(tokens, kv_width, seed + 2)}},
                     pos});
    pos += static_cast<uint32_t>(tokens);
    seed += 3;
  }
  Compare(*g, c.bucket, steps, 2e-5);
}
INSTANTIATE_TEST_SUITE_P(Shapes, RingCacheKernelTest,
                         ::testing::Values(RingCase{4, 2, 20, 5, 4, DType::kF32}, RingCase{4, 1, 64, 8, 7, DType::kF16},
                                           RingCase{3, 3, 18, 3, 1, DType::kF32},
                                           RingCase{6, 2, 10, 70, 9, DType::kF16},
                                           // Buckets that take the block-of-queries variant: a window
                                           // shorter than a block, and one spanning two blocks.
                                           RingCase{4, 2, 32, 6, 40, DType::kF16},
                                           RingCase{2, 1, 16, 20, 12, DType::kF32},
                                           RingCase{4, 1, 64, 8, 1, DType::kF16, true},
                                           RingCase{4, 2, 20, 5, 1, DType::kF32, true},
                                           RingCase{4, 2, 32, 6, 40, DType::kF16, true}),
                         [](const ::testing::TestParamInfo<RingCase>& i) {
                           const RingCase& c = i.param;
                           return absl::StrCat("h", c.heads, "_kv", c.kv_heads, "_d", c.head_dim, "_w", c.window, "_b",
                                               c.bucket, "_", graph::Name(c.cache), c.beside_global ? "_beside_global" : "");
                         });

// The interpreter refuses a step that needs a key the ring has already overwritten (here a full
// causal attention over a cache smaller than the positions).
TEST(RingCache, InterpreterRejectsOverwrittenKeys) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(4));
  TensorType cache{DType::kF32, {Dim::Static(6), Dim::Static(4)}};
  ValueId kc = b.CacheWrite(b.State("k_cache", cache), x);
  ValueId vc = b.CacheWrite(b.State("v_cache", cache), x);
  b.Output("o", b.Attention(x, kc, vc, 1, 1, 4, 0.5, 0));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  test::RandomParams params(*g, 1);
  graph::Interpreter interp(params);
  ASSERT_TRUE(interp.Run(*g, {{"x", RandomRows(6, 4, 90)}}, 0).ok());
  auto past = interp.Run(*g, {{"x", RandomRows(1, 4, 91)}}, 6);
  ASSERT_FALSE(past.ok());
  EXPECT_NE(past.status().message().find("no longer holds"), std::string::npos) << past.status();
}

}  // namespace
}  // namespace doppler
