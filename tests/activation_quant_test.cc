// x_quant = "q8" (graph/activation_quant.h): the rounding's meaning on values worked out by hand,
// the interpreter's matmul applying it, the checks on the attribute, the q8-activations pass, and
// the kernels that refuse it. (The GPU kernel against the interpreter: quant_kernel_test.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "codegen/kernel.h"
#include "graph/activation_quant.h"
#include "graph/builder.h"
#include "graph/interpreter.h"
#include "graph/verifier.h"
#include "passes/pass.h"
#include "runtime/decode_activations.h"
#include "tests/support/graph_values.h"
#include "tests/support/scoped_tune.h"

namespace doppler {
namespace {

using graph::DType;
using graph::Tensor;
using graph::ValueId;

TEST(RoundThroughQ8, ScalesEachBlockByItsLargestValueAndRoundsTiesToEven) {
  std::vector<float> x(96, 0.0f);
  // Block 0: amax 254, so d = 254 · (1/127 in f32) = 2 (the f32 product rounds to 2) and id = 0.5.
  const std::vector<float> b0 = {254.0f, 1.0f, -3.0f, 5.0f, 0.9f, -254.0f};
  // Block 1: zeros (d = 0). Block 2: amax 127, so d = 1.
  const std::vector<float> b2 = {127.0f, 3.7f, -0.2f, 64.5f, -64.5f, 0.5f, 1.5f};
  std::copy(b0.begin(), b0.end(), x.begin());
  std::copy(b2.begin(), b2.end(), x.begin() + 64);
  std::vector<float> out(96, -1.0f);
  graph::RoundThroughQ8(x.data(), 96, out.data());
  // 254/2 = 127; 1/2 = 0.5 -> 0; -3/2 = -1.5 -> -2; 5/2 = 2.5 -> 2; 0.45 -> 0; -127.
  const std::vector<float> want0 = {254.0f, 0.0f, -4.0f, 4.0f, 0.0f, -254.0f};
  const std::vector<float> want2 = {127.0f, 4.0f, 0.0f, 64.0f, -64.0f, 0.0f, 2.0f};
  for (size_t i = 0; i < 32; ++i) EXPECT_EQ(out[i], i < want0.size() ? want0[i] : 0.0f) << i;
  for (size_t i = 32; i < 64; ++i) EXPECT_EQ(out[i], 0.0f) << i;
  for (size_t i = 64; i < 96; ++i) EXPECT_EQ(out[i], i - 64 < want2.size() ? want2[i - 64] : 0.0f) << i;
}

// w = the identity, so y is the rounded x itself.
class IdentityWeights : public graph::ParamSource {
 public:
  absl::StatusOr<std::vector<float>> Float32(const graph::Node& param) const override {
    const int64_t n = param.type.shape[0].value;
    std::vector<float> w(static_cast<size_t>(n * n), 0.0f);
    for (int64_t i = 0; i < n; ++i) w[static_cast<size_t>(i * n + i)] = 1.0f;
    return w;
  }
};

graph::Graph MatMulGraph(int64_t k, DType w_dtype) {
  graph::GraphBuilder b;
  b.Output("y", b.MatMul(b.Input("x", test::Rows(k)), b.Param("w", test::Matrix(k, k, w_dtype))));
  return *std::move(b).Finish();
}

TEST(Interpreter, MatMulWithXQuantMultipliesTheRoundedX) {
  graph::Graph g = MatMulGraph(64, DType::kF32);
  g.mutable_node(*g.output("y")).attrs.Set("x_quant", std::string("q8"));
  ASSERT_TRUE(graph::Verify(g).ok());
  // Row 0: block 0 has amax 127 (d = 1), block 1 amax 254 (d = 2). Row 1: x itself is rounded.
  std::vector<float> x(128, 0.0f);
  x[0] = 127.0f, x[1] = 2.5f, x[2] = -0.7f, x[32] = 254.0f, x[33] = 3.0f, x[34] = 1.0f;
  x[64] = 0.5f, x[65] = 0.25f;  // d = 0.5 / 127: 0.25 · 254 = 63.5 -> 64
  auto out = graph::Interpreter(IdentityWeights()).Run(g, {{"x", Tensor::F32({2, 64}, x)}}, 0);
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<float>& y = out->at("y").f;
  EXPECT_EQ(y[0], 127.0f);
  EXPECT_EQ(y[1], 2.0f);
  EXPECT_EQ(y[2], -1.0f);
  EXPECT_EQ(y[32], 254.0f);
  EXPECT_EQ(y[33], 4.0f);   // 1.5 -> 2
  EXPECT_EQ(y[34], 0.0f);   // 0.5 -> 0
  EXPECT_EQ(y[64], 0.5f);
  EXPECT_FLOAT_EQ(y[65], 64.0f * (0.5f * graph::kQ8InverseMax));
}

TEST(Verifier, ChecksXQuant) {
  graph::Graph bad_value = MatMulGraph(64, DType::kF32);
  bad_value.mutable_node(*bad_value.output("y")).attrs.Set("x_quant", std::string("q4"));
  absl::Status s = graph::Verify(bad_value);
  EXPECT_NE(s.message().find("x_quant 'q4' is not q8"), std::string::npos) << s;
  graph::Graph bad_k = MatMulGraph(48, DType::kF32);
  bad_k.mutable_node(*bad_k.output("y")).attrs.Set("x_quant", std::string("q8"));
  s = graph::Verify(bad_k);
  EXPECT_NE(s.message().find("K a multiple of 32, got 48"), std::string::npos) << s;
}

// The matmuls and expert products (as a mixture's decode step has them) with integer quants.
graph::Graph ProductsOfEveryKind() {
  graph::GraphBuilder b;
  ValueId x = b.Input("x", test::Rows(256));
  b.Output("q4", b.MatMul(x, b.Param("a", test::Matrix(8, 256, DType::kQ4_K))));
  b.Output("q6", b.MatMul(x, b.Param("b", test::Matrix(8, 256, DType::kQ6_K))));
  b.Output("q8", b.MatMul(x, b.Param("c", test::Matrix(8, 256, DType::kQ8_0))));
  b.Output("f16", b.MatMul(x, b.Param("d", test::Matrix(8, 256, DType::kF16))));
  ValueId ids = b.TopK(b.Input("logits", test::Rows(4)), 2);
  b.Output("experts_q4", b.ExpertMatMul(x, b.Param("e", test::Matrix(4 * 16, 256, DType::kQ4_K)), ids, 4));
  b.Output("experts_mxfp4", b.ExpertMatMul(x, b.Param("f", test::Matrix(4 * 16, 256, DType::kMXFP4)), ids, 4));
  b.Output("experts_f16", b.ExpertMatMul(x, b.Param("g", test::Matrix(4 * 16, 256, DType::kF16)), ids, 4));
  return *std::move(b).Finish();
}

TEST(Q8ActivationsPass, MarksTheProductsWithIntegerQuantsOnly) {
  graph::Graph g = ProductsOfEveryKind();
  auto pass = passes::MakePass("q8-activations");
  ASSERT_TRUE(pass.ok()) << pass.status();
  auto changed = (*pass)->Run(g);
  ASSERT_TRUE(changed.ok() && *changed);
  ASSERT_TRUE(graph::Verify(g).ok());
  for (const char* name : {"q4", "q6", "q8", "experts_q4", "experts_mxfp4"}) {
    EXPECT_TRUE(g.node(*g.output(name)).attrs.Has("x_quant")) << name;
  }
  for (const char* name : {"f16", "experts_f16"}) EXPECT_FALSE(g.node(*g.output(name)).attrs.Has("x_quant")) << name;
  EXPECT_FALSE(*(*pass)->Run(g)) << "a second run changes nothing";
}

// Decode steps round x through q8 on devices with integer dot products: every such matmul, and the
// expert products but MXFP4's (or none, or all, with DOPPLER_TUNE's experts.q8) where the device
// stages their x; f32 keeps every product exact, and q8 on a device without the dots is an error.
TEST(DecodeActivations, ExpertProductsTakeQ8WhereTheDeviceStagesTheirX) {
  codegen::TargetCaps caps;
  caps.integer_dot_product = true;
  caps.max_shared_memory = 48 * 1024;
  auto marked = [](const graph::Graph& g) {
    std::vector<std::string> names;
    for (const auto& [name, id] : g.outputs()) {
      if (g.node(id).attrs.Has("x_quant")) names.push_back(name);
    }
    std::sort(names.begin(), names.end());
    return names;
  };
  using Names = std::vector<std::string>;
  absl::StatusOr<graph::Graph> g =
      runtime::WithDecodeActivations(ProductsOfEveryKind(), runtime::DecodeActivations::kAuto, caps, "gpu");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(marked(*g), (Names{"experts_q4", "q4", "q6", "q8"}));
  {
    const test::ScopedTune all("experts.q8=1");
    g = runtime::WithDecodeActivations(ProductsOfEveryKind(), runtime::DecodeActivations::kAuto, caps, "gpu");
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(marked(*g), (Names{"experts_mxfp4", "experts_q4", "q4", "q6", "q8"}));
  }
  {
    const test::ScopedTune none("experts.q8=0");
    g = runtime::WithDecodeActivations(ProductsOfEveryKind(), runtime::DecodeActivations::kAuto, caps, "gpu");
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(marked(*g), (Names{"q4", "q6", "q8"}));
  }
  // A row of 256 values staged as q8 takes 288 bytes: at most half of the device's shared memory,
  // leaving 16 KiB to the rest.
  caps.max_shared_memory = 16 * 1024 + 288;
  g = runtime::WithDecodeActivations(ProductsOfEveryKind(), runtime::DecodeActivations::kAuto, caps, "gpu");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(marked(*g), (Names{"experts_q4", "q4", "q6", "q8"}));
  caps.max_shared_memory = 16 * 1024 + 287;
  g = runtime::WithDecodeActivations(ProductsOfEveryKind(), runtime::DecodeActivations::kAuto, caps, "gpu");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(marked(*g), (Names{"q4", "q6", "q8"}));
  g = runtime::WithDecodeActivations(ProductsOfEveryKind(), runtime::DecodeActivations::kF32, caps, "gpu");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(marked(*g).empty());
  caps.integer_dot_product = false;
  g = runtime::WithDecodeActivations(ProductsOfEveryKind(), runtime::DecodeActivations::kQ8, caps, "the test's device");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("the test's device does not have"), std::string::npos) << g.status();
}

TEST(Codegen, XQuantIsTakenByTheMatrixVectorKernelOnDevicesWithIntegerDots) {
  graph::Graph g = MatMulGraph(256, DType::kQ4_K);
  graph::Node& y = g.mutable_node(*g.output("y"));
  y.attrs.Set("x_quant", std::string("q8"));
  codegen::TargetCaps caps;
  caps.integer_dot_product = true;
  EXPECT_TRUE(codegen::EmitKernel(g, y, caps, 1).ok());
  absl::StatusOr<codegen::Kernel> many_rows = codegen::EmitKernel(g, y, caps, 64);
  ASSERT_FALSE(many_rows.ok());
  EXPECT_NE(many_rows.status().message().find("matrix-vector kernel only, for at most 16 rows"), std::string::npos)
      << many_rows.status();
  caps.integer_dot_product = false;
  absl::StatusOr<codegen::Kernel> no_dots = codegen::EmitKernel(g, y, caps, 1);
  ASSERT_FALSE(no_dots.ok());
  EXPECT_NE(no_dots.status().message().find("integer dot products"), std::string::npos) << no_dots.status();
}

}  // namespace
}  // namespace doppler
