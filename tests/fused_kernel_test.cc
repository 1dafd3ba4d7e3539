// The GPU kernels of the fused ops against the interpreter: matmul with an epilogue chain, matmul
// with a split output read through parts, rms_norm with a residual. Random inputs, sizes that are
// not multiples of any workgroup or subgroup size, steps smaller than the plan's token bucket.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "codegen/matmul.h"
#include "codegen/shader_compiler.h"
#include "graph/builder.h"
#include "graph/epilogue.h"
#include "passes/registry.h"
#include "tests/support/compiled_kernel.h"
#include "tests/support/gpu_runner.h"
#include "tests/support/graph_values.h"
#include "tests/support/vk_test_env.h"

namespace doppler {
namespace {

using graph::Dim;
using graph::DType;
using graph::EpilogueStep;
using graph::GraphBuilder;
using graph::Tensor;
using graph::TensorType;
using graph::ValueId;
using test::Matrix;
using test::RandomRows;
using test::Rows;
using test::Vector;



using Step = std::pair<std::map<std::string, Tensor>, uint32_t>;

class FusedKernelTest : public vk::VkTest {
 protected:
  // Runs `g` on both sides for each step and compares every output; prints the largest error.
  void Compare(const graph::Graph& g, int64_t bucket, const std::vector<Step>& steps, double tolerance) {
    test::RandomParams params(g, 4321);
    auto gpu = test::GpuRunner::Create(ctx(), g, bucket, params);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    for (const auto& d : (*gpu)->plan().dispatches()) variants_.push_back(d.variant);
    graph::Interpreter interp(params);
    tolerance = test::ToleranceFor((*gpu)->plan(), tolerance);
    double worst = 0.0;
    for (size_t s = 0; s < steps.size(); ++s) {
      auto want = interp.Run(g, steps[s].first, steps[s].second);
      ASSERT_TRUE(want.ok()) << want.status();
      auto got = (*gpu)->Run(steps[s].first, steps[s].second);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->size(), want->size());
      for (const auto& [name, ref] : *want) {
        const Tensor& t = got->at(name);
        ASSERT_EQ(t.shape, ref.shape) << name;
        const double err = test::RelativeError(t.f, ref.f);
        worst = std::max(worst, err);
        EXPECT_LE(err, tolerance) << name << " step " << s;
      }
    }
    std::printf("[ max rel error %.3g ] %s\n", worst, absl::StrJoin(variants_, " ").c_str());
  }
  std::vector<std::string> variants_;  // of the dispatches, for checks and the log
};

bool HasVariant(const std::vector<std::string>& variants, const std::string& text) {
  for (const std::string& v : variants) {
    if (v.find(text) != std::string::npos) return true;
  }
  return false;
}

// --- matmul with an epilogue chain ---------------------------------------------------------------

struct Shape {
  int64_t tokens, bucket, k, n;
};

using EpilogueCase = std::tuple<std::string, DType, Shape>;

class MatMulEpilogueTest : public FusedKernelTest, public ::testing::WithParamInterface<EpilogueCase> {};

TEST_P(MatMulEpilogueTest, MatchesInterpreter) {
  const auto& [epilogue, dtype, shape] = GetParam();
  auto steps = graph::ParseEpilogue(epilogue);
  ASSERT_TRUE(steps.ok()) << steps.status();
  const int64_t w_rows = graph::IsGated(*steps) ? 2 * shape.n : shape.n;
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(shape.k));
  ValueId w = b.Param("w", Matrix(w_rows, shape.k, dtype));
  std::vector<ValueId> extras;
  for (EpilogueStep s : *steps) {
    if (s == EpilogueStep::kBias) extras.push_back(b.Param("bias", Vector(shape.n, dtype)));
    if (s == EpilogueStep::kAdd) extras.push_back(b.Input("r", Rows(shape.n)));
  }
  b.Output("y", b.MatMulFused(x, w, extras, epilogue));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  auto step = [&](int64_t tokens, uint32_t seed, uint32_t pos) {
    Step st{{{"x", RandomRows(tokens, shape.k, seed)}}, pos};
    for (EpilogueStep s : *steps) {
      if (s == EpilogueStep::kAdd) st.first["r"] = RandomRows(tokens, shape.n, seed + 1);
    }
    return st;
  };
  Compare(*g, shape.bucket, {step(shape.tokens, 1, 0), step(1, 3, 5)}, 1e-5);
  // A few rows take the matrix-vector variant, more a tiled one (on cooperative-matrix units where
  // the device has them).
  const bool coop = vk::TargetCapsOf(ctx().info()).coop_matrix_nv && shape.bucket >= codegen::kCoopMinRows &&
                    dtype != DType::kF32;
  EXPECT_TRUE(HasVariant(variants_, absl::StrCat(shape.bucket <= codegen::kGemvMaxBucket ? "gemv." : coop ? "coop." : "gemm.",
                                                 graph::Name(dtype), ".")))
      << absl::StrJoin(variants_, " ");
  EXPECT_TRUE(HasVariant(variants_, absl::StrReplaceAll(absl::StrCat("+", epilogue), {{",", "+"}})))
      << absl::StrJoin(variants_, " ");
}

INSTANTIATE_TEST_SUITE_P(
    Chains, MatMulEpilogueTest,
    ::testing::Combine(::testing::Values("silu_mul,add", "gelu_tanh_mul", "silu_mul", "bias", "bias,silu,add", "add",
                                         "silu", "gelu_tanh", "gelu_tanh_mul,bias,gelu_tanh,add"),
                       ::testing::Values(DType::kF32, DType::kF16),
                       ::testing::Values(Shape{1, 1, 131, 67}, Shape{13, 16, 131, 67}, Shape{3, 20, 200, 9})),
    [](const ::testing::TestParamInfo<EpilogueCase>& i) {
      const Shape& shape = std::get<2>(i.param);
      return absl::StrCat(absl::StrReplaceAll(std::get<0>(i.param), {{",", "_"}}), "_",
                          graph::Name(std::get<1>(i.param)), "_t", shape.tokens, "_b", shape.bucket, "_k", shape.k,
                          "_n", shape.n);
    });

// bf16 weights with a bf16 bias, on a row that is not the token dimension (the last row).
TEST_F(FusedKernelTest, Bf16WeightsAndBiasOnAStaticRow) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(130));
  ValueId r = b.Input("r", Rows(21));
  ValueId w = b.Param("w", Matrix(42, 130, DType::kBF16));
  ValueId bias = b.Param("bias", Vector(21, DType::kBF16));
  b.Output("y", b.MatMulFused(b.LastRow(x), w, {bias}, "gelu_tanh_mul,bias"));
  b.Output("z", b.MatMulFused(x, w, {bias, r}, "silu_mul,bias,add"));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  Compare(*g, 8, {{{{"x", RandomRows(6, 130, 5)}, {"r", RandomRows(6, 21, 6)}}, 0}}, 1e-5);
}

// --- an RMSNorm prologue (fuse-norm-matmul) ------------------------------------------------------

struct NormMatMulCase {
  DType dtype;
  int64_t k, tokens, bucket;
  DType gamma = DType::kF32;  // the norm weight's type
};

class NormMatMulTest : public FusedKernelTest, public ::testing::WithParamInterface<NormMatMulCase> {};

// A gated matmul with a residual add reading a Gemma-style (1 + g) norm of x, on both variants
// (matrix-vector for small buckets, tiled for larger ones) and every weight format.
TEST_P(NormMatMulTest, MatchesNormThenMatmul) {
  const NormMatMulCase& c = GetParam();
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(c.k));
  ValueId r = b.Input("r", Rows(37));
  b.Output("y", b.MatMulWithNorm(x, b.Param("g", Vector(c.k, c.gamma)), 1e-6, 1.0,
                                 b.Param("w", Matrix(74, c.k, c.dtype)), {r}, "silu_mul,add"));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  const bool coop = vk::TargetCapsOf(ctx().info()).coop_matrix_nv && c.bucket >= codegen::kCoopMinRows &&
                    c.dtype != DType::kF32;
  Compare(*g, c.bucket,
          {{{{"x", RandomRows(c.tokens, c.k, 1)}, {"r", RandomRows(c.tokens, 37, 2)}}, 0},
           {{{"x", RandomRows(1, c.k, 3)}, {"r", RandomRows(1, 37, 4)}}, 2}},
          1e-5);
  EXPECT_TRUE(HasVariant(variants_, "+rms_norm+silu_mul+add")) << absl::StrJoin(variants_, " ");
  if (coop) {
    EXPECT_TRUE(HasVariant(variants_, "coop.")) << absl::StrJoin(variants_, " ");
  }
}
INSTANTIATE_TEST_SUITE_P(
    Formats, NormMatMulTest,
    ::testing::Values(NormMatMulCase{DType::kF32, 131, 1, 1}, NormMatMulCase{DType::kF32, 131, 13, 16},
                      NormMatMulCase{DType::kF16, 200, 3, 4}, NormMatMulCase{DType::kF16, 200, 13, 16},
                      NormMatMulCase{DType::kQ8_0, 96, 1, 1}, NormMatMulCase{DType::kQ4_K, 512, 1, 1},
                      NormMatMulCase{DType::kQ4_K, 256, 13, 16}, NormMatMulCase{DType::kQ6_K, 256, 2, 2},
                      NormMatMulCase{DType::kQ5_K, 256, 1, 1}, NormMatMulCase{DType::kQ6_K, 4352, 1, 1},
                      // Buckets that take the cooperative-matrix variant where the device has it.
                      NormMatMulCase{DType::kF16, 200, 70, 96}, NormMatMulCase{DType::kQ4_K, 512, 65, 128},
                      NormMatMulCase{DType::kQ8_0, 96, 64, 64}, NormMatMulCase{DType::kQ6_K, 512, 70, 128},
                      NormMatMulCase{DType::kQ5_K, 256, 64, 64}, NormMatMulCase{DType::kBF16, 130, 66, 96},
                      NormMatMulCase{DType::kQ5_0, 160, 70, 96}, NormMatMulCase{DType::kQ5_0, 96, 1, 1},
                      NormMatMulCase{DType::kQ5_0, 160, 13, 16},
                      // 16-bit norm weights, read four at a time where K is a multiple of 4.
                      NormMatMulCase{DType::kQ4_K, 512, 1, 1, DType::kF16}, NormMatMulCase{DType::kF16, 200, 3, 4, DType::kBF16},
                      NormMatMulCase{DType::kQ8_0, 96, 13, 16, DType::kBF16}, NormMatMulCase{DType::kF32, 131, 1, 1, DType::kF16}),
    [](const ::testing::TestParamInfo<NormMatMulCase>& i) {
      return absl::StrCat(graph::Name(i.param.dtype), "_k", i.param.k, "_t", i.param.tokens, "_b", i.param.bucket,
                          i.param.gamma == DType::kF32 ? "" : absl::StrCat("_g", graph::Name(i.param.gamma)));
    });

// The cooperative-matrix kernels compile to SPIR-V on any machine (they run only on devices with
// VK_NV_cooperative_matrix): every weight format, with and without a gate and a norm prologue.
TEST(CoopMatMul, KernelsCompileForNvidia) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(512));
  ValueId r = b.Input("r", Rows(64));
  for (DType dtype : {DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ5_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                      DType::kQ4_0, DType::kQ4_1, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kIQ4_NL, DType::kIQ4_XS,
                      DType::kMXFP4}) {
    const std::string name = graph::Name(dtype);
    b.Output("g_" + name, b.MatMulWithNorm(x, b.Param("gamma_" + name, Vector(512, DType::kF32)), 1e-6, 0.0,
                                            b.Param("wg_" + name, Matrix(128, 512, dtype)), {r}, "silu_mul,add"));
    b.Output("p_" + name, b.MatMul(x, b.Param("wp_" + name, Matrix(100, 512, dtype))));
  }
  // Enough columns for a grid of 128-row tiles, with and without a gate.
  b.Output("tall", b.MatMul(x, b.Param("w_tall", Matrix(8192, 512, DType::kQ6_K))));
  b.Output("wide", b.MatMul(x, b.Param("w_wide", Matrix(16384, 512, DType::kQ4_K))));
  b.Output("wide_gated", b.MatMulWithNorm(x, b.Param("gamma_wide", Vector(512, DType::kF32)), 1e-6, 0.0,
                                          b.Param("wg_wide", Matrix(16384, 512, DType::kQ4_K)), {}, "silu_mul"));
  // K not a multiple of 4: x staged from single values.
  b.Output("odd_k", b.MatMulWithNorm(b.Input("x130", Rows(130)), b.Param("gamma_odd", Vector(130, DType::kF32)), 1e-6,
                                     0.0, b.Param("w_odd", Matrix(100, 130, DType::kBF16)), {}, ""));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  codegen::TargetCaps caps = test::NvidiaCoopCaps();
  // K-slices of 64 wherever they fit in shared memory, but for gated 128-row tiles, which take 32
  // (codegen/tuning/coop.cc): with NVIDIA's 48 KiB all others; with 24 KiB not the 128-row tiles
  // or the gated 64-row ones.
  for (const auto& [shared_memory, want_k32] : {std::pair{49152u, 1}, std::pair{24576u, 18}}) {
    caps.max_shared_memory = shared_memory;
    int coop = 0, tall_tiles = 0, k32 = 0;
    for (const graph::Node& n : g->nodes()) {
      if (n.kind != graph::OpKind::kMatMul) continue;
      absl::StatusOr<test::CompiledKernel> compiled = test::EmitAndCompile(*g, n, caps, 128);
      ASSERT_TRUE(compiled.ok()) << compiled.status();
      const codegen::Kernel* k = &compiled->kernel;
      const codegen::CompiledShader* spirv = &compiled->spirv;
      ASSERT_EQ(k->variant.rfind("coop.", 0), 0u) << k->variant;
      // Reflected from the module's declarations (SPIRV-Cross cannot parse these instructions):
      // the step block, then one buffer per argument, only y writable; a subgroup per block of
      // the tile ("tile{bm}x{bn}.sg{sm}x{sn}").
      ASSERT_EQ(spirv->bindings.size(), k->args.size() + 1);
      for (size_t i = 0; i < spirv->bindings.size(); ++i) {
        EXPECT_EQ(spirv->bindings[i].binding, i);
        EXPECT_EQ(spirv->bindings[i].read_only, i != 1) << "binding " << i;
      }
      const bool tall = k->variant.find(".tile128x64") != std::string::npos;
      int bm = 0, bn = 0, sm = 0, sn = 0;
      ASSERT_EQ(std::sscanf(k->variant.substr(k->variant.find(".tile")).c_str(), ".tile%dx%d.sg%dx%d", &bm, &bn, &sm, &sn), 4)
          << k->variant;
      EXPECT_EQ(spirv->local_size[0], 32u * (bm / sm) * (bn / sn)) << k->variant;
      tall_tiles += tall ? 1 : 0;
      k32 += k->variant.find(".k32") != std::string::npos ? 1 : 0;
      ++coop;
    }
    EXPECT_EQ(coop, 34);
    EXPECT_EQ(tall_tiles, 3);
    EXPECT_EQ(k32, want_k32) << "shared memory " << shared_memory;
  }
}

// --- split outputs read through parts -----------------------------------------------------------

struct SplitCase {
  int64_t tokens, bucket;
  DType dtype;
};

class MatMulSplitTest : public FusedKernelTest, public ::testing::WithParamInterface<SplitCase> {};

// A fused q/k/v projection with bias: each part is an output, and kernels read parts at their
// offsets (scale reads q, add reads k and v).
TEST_P(MatMulSplitTest, QkvWithBias) {
  const SplitCase& c = GetParam();
  const int64_t k = 131, q_width = 40, kv_width = 22;
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(k));
  ValueId w = b.Param("wqkv", Matrix(q_width + 2 * kv_width, k, c.dtype));
  ValueId bias = b.Param("bias", Vector(q_width + 2 * kv_width, c.dtype));
  ValueId qkv = b.MatMulFused(x, w, {bias}, "bias", absl::StrCat(q_width, ",", kv_width, ",", kv_width));
  ValueId q = b.Part(qkv, 0), kk = b.Part(qkv, 1), v = b.Part(qkv, 2);
  b.Output("q", q);
  b.Output("k", kk);
  b.Output("v", v);
  b.Output("q_scaled", b.Scale(q, 0.5));
  b.Output("k_plus_v", b.Add(kk, v));
  b.Output("v_proj", b.MatMul(v, b.Param("wo", Matrix(17, kv_width, c.dtype))));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  Compare(*g, c.bucket, {{{{"x", RandomRows(c.tokens, k, 11)}}, 0}, {{{"x", RandomRows(1, k, 12)}}, 4}}, 1e-5);
  EXPECT_TRUE(HasVariant(variants_, "+bias+split3")) << absl::StrJoin(variants_, " ");
}

// A gate/up projection with a gated epilogue and a residual add, split in two uneven parts.
TEST_P(MatMulSplitTest, GatedWithResidualSplitInTwo) {
  const SplitCase& c = GetParam();
  const int64_t k = 77, n = 45;
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(k));
  ValueId r = b.Input("r", Rows(n));
  ValueId y = b.MatMulFused(x, b.Param("w", Matrix(2 * n, k, c.dtype)), {r}, "silu_mul,add", "13,32");
  b.Output("a", b.Part(y, 0));
  b.Output("b", b.Part(y, 1));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  auto step = [&](int64_t tokens, uint32_t seed, uint32_t pos) {
    return Step{{{"x", RandomRows(tokens, k, seed)}, {"r", RandomRows(tokens, n, seed + 1)}}, pos};
  };
  Compare(*g, c.bucket, {step(c.tokens, 21, 0), step(1, 23, 2)}, 1e-5);
  EXPECT_TRUE(HasVariant(variants_, "+silu_mul+add+split2")) << absl::StrJoin(variants_, " ");
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatMulSplitTest,
                         ::testing::Values(SplitCase{1, 1, DType::kF32}, SplitCase{1, 1, DType::kF16},
                                           SplitCase{13, 16, DType::kF32}, SplitCase{5, 11, DType::kF16}),
                         [](const ::testing::TestParamInfo<SplitCase>& i) {
                           return absl::StrCat("t", i.param.tokens, "_b", i.param.bucket, "_",
                                               graph::Name(i.param.dtype));
                         });

// --- rms_norm with a residual --------------------------------------------------------------------

struct NormCase {
  int64_t tokens, bucket, d;
  double offset;
  DType dtype;
};

class RmsNormResidualTest : public FusedKernelTest, public ::testing::WithParamInterface<NormCase> {};

// Both parts as outputs, and read by later kernels the way a layer does: the normalised part feeds
// a matmul, the sum part is the next residual norm's residual.
TEST_P(RmsNormResidualTest, WritesSumAndNormalised) {
  const NormCase& c = GetParam();
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(c.d));
  ValueId r = b.Input("r", Rows(c.d));
  ValueId s1 = b.RmsNormResidual(x, b.Param("w1", Vector(c.d, c.dtype)), r, 1e-5, c.offset);
  ValueId h = b.MatMul(b.Part(s1, 1), b.Param("wo", Matrix(c.d, c.d, c.dtype)));
  ValueId s2 = b.RmsNormResidual(h, b.Param("w2", Vector(c.d, c.dtype)), b.Part(s1, 0), 1e-6, c.offset);
  b.Output("sum1", b.Part(s1, 0));
  b.Output("norm1", b.Part(s1, 1));
  b.Output("h", h);
  b.Output("sum2", b.Part(s2, 0));
  b.Output("norm2", b.Part(s2, 1));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  auto step = [&](int64_t tokens, uint32_t seed, uint32_t pos) {
    return Step{{{"x", RandomRows(tokens, c.d, seed)}, {"r", RandomRows(tokens, c.d, seed + 1)}}, pos};
  };
  Compare(*g, c.bucket, {step(c.tokens, 31, 0), step(1, 33, 3)}, 1e-5);
  EXPECT_TRUE(HasVariant(variants_, "+residual")) << absl::StrJoin(variants_, " ");
}

// With a norm prologue (Gemma 3's post-norm, residual add and next pre-norm as one kernel), from
// the unfused ops through fuse-residual-rmsnorm.
TEST_P(RmsNormResidualTest, NormalisesXBeforeTheAdd) {
  const NormCase& c = GetParam();
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(c.d));
  ValueId post = b.RmsNorm(x, b.Param("wp", Vector(c.d, c.dtype)), 1e-6, c.offset);
  ValueId s = b.Add(post, b.Input("r", Rows(c.d)));
  b.Output("sum", s);
  b.Output("norm", b.RmsNorm(s, b.Param("w", Vector(c.d, c.dtype)), 1e-5, c.offset));
  auto unfused = std::move(b).Finish();
  ASSERT_TRUE(unfused.ok()) << unfused.status();
  graph::Graph g = *unfused;
  absl::StatusOr<bool> changed = passes::MakeFuseResidualRmsNorm()->Run(g);
  ASSERT_TRUE(changed.ok() && *changed) << changed.status();
  auto step = [&](int64_t tokens, uint32_t seed, uint32_t pos) {
    return Step{{{"x", RandomRows(tokens, c.d, seed)}, {"r", RandomRows(tokens, c.d, seed + 1)}}, pos};
  };
  Compare(g, c.bucket, {step(c.tokens, 41, 0), step(1, 43, 3)}, 1e-5);
  EXPECT_TRUE(HasVariant(variants_, "+rms_norm+residual")) << absl::StrJoin(variants_, " ");
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormResidualTest,
                         ::testing::Values(NormCase{1, 1, 333, 0.0, DType::kF32}, NormCase{3, 4, 333, 1.0, DType::kF32},
                                           NormCase{3, 4, 333, 0.0, DType::kF16},
                                           NormCase{9, 12, 77, 1.0, DType::kBF16},
                                           // Several values per invocation in a 512-wide workgroup.
                                           NormCase{2, 2, 2500, 1.0, DType::kF16}),
                         [](const ::testing::TestParamInfo<NormCase>& i) {
                           return absl::StrCat("t", i.param.tokens, "_b", i.param.bucket, "_d", i.param.d, "_off",
                                               static_cast<int>(i.param.offset), "_", graph::Name(i.param.dtype));
                         });

}  // namespace
}  // namespace doppler
