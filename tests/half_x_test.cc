// Values stored as f16 between two kernels (codegen/half_x.h): which values lowering stores so, for
// which buckets and devices, what their producers and readers then declare, and (on a device) that
// a chain through such a value gives the interpreter's results and exactly those it gives with the
// value in f32, since its readers round it to f16 either way.
#include "codegen/half_x.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "codegen/known_targets.h"
#include "graph/builder.h"
#include "graph/interpreter.h"
#include "tests/support/compiled_kernel.h"
#include "tests/support/gpu_runner.h"
#include "tests/support/graph_values.h"
#include "tests/support/scoped_tune.h"
#include "tests/support/vk_test_env.h"

namespace doppler {
namespace {

using graph::DType;
using graph::ValueId;

constexpr int64_t kK = 768, kF = 256;  // x's width and the gated product's columns (a Q4_K block)

// A batched decode step's shapes (a row per sequence): a gated product whose value a plain one
// with a residual add reads, and, with `others`, an attention read by a product, a product read by
// a product with a norm prologue, and one that is a graph output as well as read.
graph::Graph ChainGraph(bool others, bool row_per_sequence = true) {
  graph::GraphBuilder b;
  ValueId x = b.Input("x", test::Rows(kK));
  ValueId h = b.MatMulFused(x, b.Param("wg", test::Matrix(2 * kF, kK, DType::kQ4_K)), {}, "silu_mul", "", "gated");
  b.Output("y", b.MatMulFused(h, b.Param("wd", test::Matrix(200, kF, DType::kQ4_K)), {b.Input("r", test::Rows(200))},
                              "add", "", "down"));
  if (others) {
    const int64_t heads = 4, kv_heads = 2, head_dim = 64;
    const graph::TensorType cache{DType::kF16, {graph::Dim::Static(64), graph::Dim::Static(kv_heads * head_dim)}};
    ValueId kc = b.CacheWrite(b.State("k_cache", cache), b.Input("k", test::Rows(kv_heads * head_dim)));
    ValueId vc = b.CacheWrite(b.State("v_cache", cache), b.Input("v", test::Rows(kv_heads * head_dim)));
    ValueId a = b.Attention(b.Input("q", test::Rows(heads * head_dim)), kc, vc, heads, kv_heads, head_dim, 0.125, 0);
    b.Output("o", b.MatMul(a, b.Param("wo", test::Matrix(96, heads * head_dim, DType::kQ8_0)), "o"));
    ValueId n = b.MatMul(x, b.Param("wn", test::Matrix(kF, kK, DType::kQ4_K)), "normed_input");
    b.Output("z", b.MatMulWithNorm(n, b.Param("gamma", test::Vector(kF)), 1e-6, 0.0,
                                   b.Param("wz", test::Matrix(64, kF, DType::kQ4_K)), {}, "", "normed"));
    ValueId u = b.MatMul(x, b.Param("wu", test::Matrix(kF, kK, DType::kQ4_K)), "output_too");
    b.Output("u", u);
    b.Output("v2", b.MatMul(u, b.Param("wv", test::Matrix(64, kF, DType::kQ4_K)), "reads_output"));
  }
  graph::Graph g = *std::move(b).Finish();
  if (row_per_sequence) g.set_paging(graph::Paging{16, 4, true, false});
  return g;
}

const graph::Node& Named(const graph::Graph& g, const char* label) {
  for (const graph::Node& n : g.nodes()) {
    if (n.label == label) return n;
  }
  ADD_FAILURE() << "no node " << label;
  return g.node(0);
}

TEST(HalfX, ValuesWhoseReadersAllTakeCoopRowsAreStoredAsHalves) {
  const graph::Graph g = ChainGraph(/*others=*/true);
  const codegen::TargetCaps nvidia = codegen::H100LikeCaps();
  const codegen::InMatMulRules rules;
  const graph::Node& gated = Named(g, "gated");
  const graph::Node& attention = Named(g, "attention");
  for (int64_t tokens : {4, 8, 16, 32, 64}) {
    EXPECT_TRUE(codegen::HalfX(g, gated, nvidia, tokens, rules)) << tokens;
    EXPECT_TRUE(codegen::HalfX(g, attention, nvidia, tokens, rules)) << tokens;
    EXPECT_FALSE(codegen::HalfX(g, Named(g, "normed_input"), nvidia, tokens, rules)) << "read by a norm prologue";
    EXPECT_FALSE(codegen::HalfX(g, Named(g, "output_too"), nvidia, tokens, rules)) << "a graph output";
    EXPECT_FALSE(codegen::HalfX(g, Named(g, "down"), nvidia, tokens, rules)) << "read by nothing but the host";
  }
  for (int64_t tokens : {1, 2}) {
    EXPECT_FALSE(codegen::HalfX(g, gated, nvidia, tokens, rules)) << tokens << " rows: the matrix-vector kernels read x";
  }
  EXPECT_FALSE(codegen::HalfX(g, gated, nvidia, 128, rules)) << "more rows than coop_rows takes";
  EXPECT_FALSE(codegen::HalfX(g, gated, codegen::LavapipeCaps(), 16, rules)) << "no cooperative matrices";
  codegen::TargetCaps no_storage16 = nvidia;
  no_storage16.storage_16bit = false;
  EXPECT_FALSE(codegen::HalfX(g, gated, no_storage16, 16, rules));
  EXPECT_FALSE(codegen::HalfX(g, gated, nvidia, 16, codegen::InMatMulRules{.half_x = false}));
  const graph::Graph prefill = ChainGraph(/*others=*/false, /*row_per_sequence=*/false);
  EXPECT_FALSE(codegen::HalfX(prefill, Named(prefill, "gated"), nvidia, 64, rules)) << "a prefill's tiles";
  {
    test::ScopedTune off("matmul.half_x=0");
    absl::StatusOr<codegen::InMatMulRules> tuned = codegen::InMatMulRulesFromTune();
    ASSERT_TRUE(tuned.ok()) << tuned.status();
    EXPECT_FALSE(tuned->half_x);
  }
}

// What the producers and readers declare, compiled for NVIDIA.
TEST(HalfX, ProducersWriteHalvesAndReadersReadThem) {
  const graph::Graph g = ChainGraph(/*others=*/true);
  for (int64_t tokens : {8, 16, 64}) {
    for (const char* label : {"gated", "attention", "down", "o"}) {
      absl::StatusOr<test::CompiledKernel> k = test::EmitAndCompile(g, Named(g, label), codegen::H100LikeCaps(), tokens);
      ASSERT_TRUE(k.ok()) << label << " " << tokens << ": " << k.status();
      const std::string& glsl = k->kernel.glsl;
      const bool producer = std::string(label) == "gated" || std::string(label) == "attention";
      EXPECT_EQ(glsl.find("float16_t y[]") != std::string::npos || glsl.find("float16_t o[]") != std::string::npos,
                producer)
          << label << " " << tokens;
      EXPECT_EQ(glsl.find("uvec2 x4[]") != std::string::npos, !producer) << label << " " << tokens;
    }
  }
  test::ScopedTune off("matmul.half_x=0");
  absl::StatusOr<test::CompiledKernel> k = test::EmitAndCompile(g, Named(g, "gated"), codegen::H100LikeCaps(), 16);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->kernel.glsl.find("float16_t y[]"), std::string::npos);
}

class HalfXKernelTest : public vk::VkTest {};

// The chain at buckets coop_rows takes (rows that fill no fragment among them) against the
// interpreter, and bit for bit against the same plan with the value in f32.
TEST_F(HalfXKernelTest, AChainThroughHalvesMatchesTheInterpreterAndF32Exactly) {
  const graph::Graph g = ChainGraph(/*others=*/false);
  const graph::Graph reference = ChainGraph(/*others=*/false, /*row_per_sequence=*/false);
  test::RandomParams params(g, 7);
  graph::Interpreter interp(params);
  for (const auto& [bucket, rows] : {std::pair<int64_t, int64_t>{4, 3}, {8, 5}, {16, 13}, {32, 17}, {64, 40}, {64, 64}}) {
    const std::map<std::string, graph::Tensor> inputs = {{"x", test::RandomRows(rows, kK, 3 + rows)},
                                                         {"r", test::RandomRows(rows, 200, 4 + rows)}};
    absl::StatusOr<std::map<std::string, graph::Tensor>> want = interp.Run(reference, inputs, 0);
    ASSERT_TRUE(want.ok()) << want.status();
    std::map<std::string, std::vector<float>> got;
    for (const char* tune : {"", "matmul.half_x=0"}) {
      test::ScopedTune scoped(tune);
      absl::StatusOr<std::unique_ptr<test::GpuRunner>> gpu = test::GpuRunner::Create(ctx(), g, bucket, params);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      absl::StatusOr<std::map<std::string, graph::Tensor>> out = (*gpu)->Run(inputs, 0);
      ASSERT_TRUE(out.ok()) << out.status();
      got[tune] = out->at("y").f;
      EXPECT_LE(test::RelativeError(got[tune], want->at("y").f), 3e-3) << "rows " << rows << " [" << tune << "]";
    }
    EXPECT_EQ(got[""], got["matmul.half_x=0"]) << "rows " << rows;
  }
}

}  // namespace
}  // namespace doppler
