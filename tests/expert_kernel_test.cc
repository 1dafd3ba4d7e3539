// The mixture-of-experts kernels (router, expert matmul, route sum) against the interpreter on
// random inputs: expert counts, top-k and sizes that are not the fixtures' nor multiples of any
// workgroup, steps shorter than the bucket, a decode step after them, each weight type; the
// products a row at a time and grouped by expert.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend_vk/plan.h"
#include "graph/builder.h"
#include "graph/interpreter.h"
#include "graph/verifier.h"
#include "passes/pass.h"
#include "tests/support/gpu_runner.h"
#include "tests/support/graph_values.h"
#include "tests/support/scoped_tune.h"
#include "tests/support/vk_test_env.h"

namespace doppler {
namespace {

using graph::DType;
using graph::GraphBuilder;
using graph::Tensor;
using graph::ValueId;
using test::Matrix;
using test::RandomRows;
using test::Rows;

using Step = std::pair<std::map<std::string, Tensor>, uint32_t>;

class ExpertKernelTest : public vk::VkTest {
 protected:
  // Runs `g` on the GPU and in the interpreter for each step; ids must be equal, floats within
  // `spread` times `tolerance` (test::ToleranceFor's where products take f16 operands) of the
  // largest value: `spread` for outputs whose rounding is a larger share of their largest value
  // than their products' (clamped ones). Returns the plan's dispatches' variants.
  std::vector<std::string> Compare(const graph::Graph& g, int64_t bucket, const std::vector<Step>& steps,
                                   double tolerance, std::optional<codegen::TargetCaps> caps = std::nullopt,
                                   double spread = 1) {
    std::vector<std::string> variants;
    CompareInto(g, bucket, steps, tolerance, caps, spread, variants);
    return variants;
  }
  void CompareInto(const graph::Graph& g, int64_t bucket, const std::vector<Step>& steps, double tolerance,
                   std::optional<codegen::TargetCaps> caps, double spread, std::vector<std::string>& variants) {
    test::RandomParams params(g, 77);
    auto gpu = test::GpuRunner::Create(ctx(), g, bucket, params, caps);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    for (const auto& d : (*gpu)->plan().dispatches()) variants.push_back(d.family + "." + d.variant);
    tolerance = spread * test::ToleranceFor((*gpu)->plan(), tolerance);
    graph::Interpreter interp(params);
    for (size_t s = 0; s < steps.size(); ++s) {
      auto want = interp.Run(g, steps[s].first, steps[s].second);
      ASSERT_TRUE(want.ok()) << want.status();
      auto got = (*gpu)->Run(steps[s].first, steps[s].second);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_NO_FATAL_FAILURE(test::ExpectOutputsMatch(*got, *want, tolerance, s));
    }
  }
};

// top_k over more experts than the router's workgroup has invocations, and both weightings.
TEST_F(ExpertKernelTest, RouterMatchesTheInterpreter) {
  for (auto [experts, k] : std::vector<std::pair<int64_t, int64_t>>{{150, 7}, {5, 3}, {9, 1}, {1000, 4}}) {
    GraphBuilder b;
    ValueId logits = b.Input("x", Rows(experts));
    ValueId ids = b.TopK(logits, k);
    b.Output("ids", ids);
    b.Output("chosen", b.RouteWeights(logits, ids, "softmax_chosen"));
    b.Output("all", b.RouteWeights(logits, ids, "softmax_all"));
    auto g = std::move(b).Finish();
    ASSERT_TRUE(g.ok()) << g.status();
    const std::vector<Step> steps = {{{{"x", RandomRows(6, experts, 3)}}, 0}, {{{"x", RandomRows(1, experts, 4)}}, 6}};
    Compare(*g, 8, steps, 1e-5);
    Compare(*g, 8, steps, 1e-5, WithoutSubgroupArithmetic());
  }
}

// top_k in its readers (codegen/in_matmul.h): at one row, the route_weights kernel ranks the row
// and writes the ids, and the gated product ranks its token's row in each workgroup, for
// expert counts a subgroup's lanes hold one or several of, or that only a workgroup holds (1000),
// with and without subgroup arithmetic, on logits with many ties; the ids (an output) equal the
// interpreter's. At more rows, grouped, and with the rule off, top_k is a dispatch of its own.
TEST_F(ExpertKernelTest, TopKIsRankedByItsReaders) {
  for (auto [experts, k] : std::vector<std::pair<int64_t, int64_t>>{{5, 3}, {150, 7}, {1000, 4}}) {
    SCOPED_TRACE(experts);
    constexpr int64_t kHidden = 40, kWidth = 24;
    GraphBuilder b;
    ValueId x = b.Input("x", Rows(kHidden));
    ValueId logits = b.Input("logits", Rows(experts));
    ValueId ids = b.TopK(logits, k);
    b.Output("ids", ids);
    ValueId weights = b.RouteWeights(logits, ids, "softmax_all");
    ValueId h = b.ExpertMatMul(x, b.Param("gate_up", Matrix(experts * 2 * kWidth, kHidden, DType::kF16)), ids, experts,
                               "silu_mul");
    b.Output("h", h);
    ValueId down = b.ExpertMatMul(h, b.Param("down", Matrix(experts * kHidden, kWidth, DType::kF16)), ids, experts);
    b.Output("y", b.RouteSum(down, weights));
    auto g = std::move(b).Finish();
    ASSERT_TRUE(g.ok()) << g.status();
    // Logits rounded to halves: many ties (the lower expert first), and -0 beside +0 (equal).
    auto step = [&](int64_t tokens, uint32_t seed, uint32_t pos) {
      Tensor logits = RandomRows(tokens, experts, seed + 1);
      for (float& v : logits.f) v = std::round(v * 2) / 2;
      return Step{{{"x", RandomRows(tokens, kHidden, seed)}, {"logits", logits}}, pos};
    };
    auto ranked = [](const std::vector<std::string>& variants) {
      int top_k = 0, ranking = 0;
      for (const std::string& v : variants) {
        top_k += v.rfind("router.top_k", 0) == 0 ? 1 : 0;
        ranking += v.find("+top_k") != std::string::npos ? 1 : 0;
      }
      return top_k == 0 && ranking == 2;
    };
    EXPECT_TRUE(ranked(Compare(*g, 1, {step(1, 10, 0), step(1, 20, 1)}, 1e-5)));
    EXPECT_TRUE(ranked(Compare(*g, 1, {step(1, 30, 0)}, 1e-5, WithoutSubgroupArithmetic())));
    EXPECT_FALSE(ranked(Compare(*g, 8, {step(5, 40, 0)}, 1e-5)));
    EXPECT_FALSE(ranked(Compare(*g, 80, {step(70, 50, 0)}, 1e-5)));
    const test::ScopedTune off("matmul.top_k=0");
    EXPECT_FALSE(ranked(Compare(*g, 1, {step(1, 60, 0)}, 1e-5)));
  }
}

struct ExpertCase {
  DType dtype;
  int64_t experts, k, hidden, width;  // width: each expert's intermediate size
  double tolerance;
};

void PrintTo(const ExpertCase& c, std::ostream* os) {
  *os << graph::Name(c.dtype) << " experts " << c.experts << " top-" << c.k << " hidden " << c.hidden << " width "
      << c.width;
}

class ExpertMatMulKernelTest : public ExpertKernelTest, public ::testing::WithParamInterface<ExpertCase> {};

// How much larger a clamped SwiGLU's error is, relative to its largest value, than its products'.
constexpr double kClampSpread = 4;

// The expert MLP the tests share: gate and up stacked per expert ([gate | up] rows, gated silu) as
// output h, then down with a slot's own input, its slots weighted and summed, as output y.
struct Mlp {
  ValueId x, logits, ids, weights, gate_up;
};
Mlp BuildMlp(GraphBuilder& b, const ExpertCase& c) {
  Mlp m;
  m.x = b.Input("x", Rows(c.hidden));
  m.logits = b.Input("logits", Rows(c.experts));
  m.ids = b.TopK(m.logits, c.k);
  m.weights = b.RouteWeights(m.logits, m.ids, "softmax_chosen");
  m.gate_up = b.Param("gate_up", Matrix(c.experts * 2 * c.width, c.hidden, c.dtype));
  ValueId down = b.Param("down", Matrix(c.experts * c.hidden, c.width, c.dtype));
  ValueId h = b.ExpertMatMul(m.x, m.gate_up, m.ids, c.experts, "silu_mul");
  b.Output("h", h);
  b.Output("y", b.RouteSum(b.ExpertMatMul(h, down, m.ids, c.experts), m.weights));
  return m;
}
// A step of `tokens` random rows of x and router logits at position `pos`.
Step MlpStep(const ExpertCase& c, int64_t tokens, uint32_t seed, uint32_t pos) {
  return Step{{{"x", RandomRows(tokens, c.hidden, seed)}, {"logits", RandomRows(tokens, c.experts, seed + 1)}}, pos};
}

// A whole expert MLP: gate and up stacked per expert ([gate | up] rows, gated epilogue), the
// products of gate and of up each on its own (shared x), and down with a slot's own input,
// weighted and summed.
TEST_P(ExpertMatMulKernelTest, ExpertMlpMatchesTheInterpreter) {
  const ExpertCase& c = GetParam();
  GraphBuilder b;
  const Mlp m = BuildMlp(b, c);
  b.Output("gate", b.ExpertMatMul(m.x, b.Param("gate", Matrix(c.experts * c.width, c.hidden, c.dtype)), m.ids, c.experts));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  Compare(*g, 8, {MlpStep(c, 5, 10, 0), MlpStep(c, 1, 20, 5)}, c.tolerance);
  Compare(*g, 8, {MlpStep(c, 3, 30, 0)}, c.tolerance, WithoutSubgroupArithmetic());
}

// Every shape of the matrix-vector kernel (tuning::ExpertGemvConfig: columns a workgroup; the
// small-block formats' parts of a word, experts.part=8, beside the rule's whole block; MXFP4's in
// float dots, experts.half=0, beside the rule's f16 pairs where the device has f16 arithmetic, which
// other types ignore), on the whole expert MLP with its route sum.
TEST_P(ExpertMatMulKernelTest, EveryGemvShapeMatchesTheInterpreter) {
  const ExpertCase& c = GetParam();
  GraphBuilder b;
  BuildMlp(b, c);
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  for (const char* tune : {"experts.cols=1", "experts.cols=2", "experts.cols=8", "experts.cols=16", "experts.part=8",
                           "experts.part=8,experts.cols=1", "experts.half=0", "experts.half=0,experts.cols=1"}) {
    SCOPED_TRACE(tune);
    const test::ScopedTune scoped(tune);
    const std::vector<std::string> variants = Compare(*g, 8, {MlpStep(c, 5, 10, 0), MlpStep(c, 1, 20, 5)}, c.tolerance);
    EXPECT_EQ(std::count_if(variants.begin(), variants.end(),
                            [](const std::string& v) { return v.rfind("expert_matmul.gemv.", 0) == 0; }),
              2);
  }
}

// GPT-OSS's experts: per-expert biases before the gate (on both halves of the stacked [gate | up]
// rows) and after down (before the route weight), and the clamped SwiGLU, fused into the gated
// product; and unfused, as the model declares them (a bias step each, then clamped_swiglu). A
// limit of 1.5 clamps many of the random products' values.
TEST_P(ExpertMatMulKernelTest, BiasedClampedExpertMlpMatchesTheInterpreter) {
  const ExpertCase& c = GetParam();
  const graph::Attrs clamp{{"alpha", 1.702}, {"limit", 1.5}};
  auto bias = [&](GraphBuilder& b, const char* name, int64_t n) {
    return b.Param(name, {DType::kF32, {graph::Dim::Static(c.experts * n)}});
  };
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(c.hidden));
  ValueId logits = b.Input("logits", Rows(c.experts));
  ValueId ids = b.TopK(logits, c.k);
  ValueId weights = b.RouteWeights(logits, ids, "softmax_chosen");
  ValueId gate_up = b.Param("gate_up", Matrix(c.experts * 2 * c.width, c.hidden, c.dtype));
  ValueId gate = b.Param("gate", Matrix(c.experts * c.width, c.hidden, c.dtype));
  ValueId up = b.Param("up", Matrix(c.experts * c.width, c.hidden, c.dtype));
  ValueId down = b.Param("down", Matrix(c.experts * c.hidden, c.width, c.dtype));
  ValueId bd = bias(b, "down_bias", c.hidden);
  ValueId h = b.ExpertMatMul(x, gate_up, ids, c.experts, "bias,clamped_swiglu", "gate_up",
                             {bias(b, "gate_up_bias", 2 * c.width)}, clamp);
  b.Output("h", h);
  b.Output("y", b.RouteSum(b.ExpertMatMul(h, down, ids, c.experts, "bias", "down", {bd}), weights));
  ValueId g = b.ExpertMatMul(x, gate, ids, c.experts, "bias", "gate", {bias(b, "gate_bias", c.width)});
  ValueId u = b.ExpertMatMul(x, up, ids, c.experts, "bias", "up", {bias(b, "up_bias", c.width)});
  b.Output("unfused", b.ClampedSwiglu(g, u, 1.702, 1.5));
  auto graph = std::move(b).Finish();
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto step = [&](int64_t tokens, uint32_t seed, uint32_t pos) { return MlpStep(c, tokens, seed, pos); };
  // The clamp keeps h within (limit + 1) * limit, well under the sums it is made of (of up to 256
  // products, about 5 in size here), so their f32 rounding is a larger share of it: 2.4e-5 of the
  // largest h seen (Q4_K) against 1e-5 unclamped.
  Compare(*graph, 8, {step(5, 10, 0), step(1, 20, 5)}, c.tolerance, std::nullopt, kClampSpread);
  Compare(*graph, 8, {step(3, 30, 0)}, c.tolerance, WithoutSubgroupArithmetic(), kClampSpread);
  const test::ScopedTune word_parts("experts.part=8");
  Compare(*graph, 8, {step(5, 10, 0), step(1, 20, 5)}, c.tolerance, std::nullopt, kClampSpread);
}

// Many rows, grouped by expert (the tiled products a group, then the route sum as a dispatch of its
// own): a bucket past tuning::kExpertsGroupedFrom with steps of 70 rows (an expert's rows then
// fill more than one 64-row tile where it is chosen by most tokens) and of 13, then grouping
// forced on a bucket of 8 (DOPPLER_TUNE experts.grouped_from=1: tiles of a few rows, some experts
// chosen by none), and the biased, clamped products of GPT-OSS grouped too.
TEST_P(ExpertMatMulKernelTest, GroupedExpertMlpMatchesTheInterpreter) {
  const ExpertCase& c = GetParam();
  const graph::Attrs clamp{{"alpha", 1.702}, {"limit", 1.5}};
  GraphBuilder b;
  const Mlp m = BuildMlp(b, c);
  b.Output("hb", b.ExpertMatMul(m.x, m.gate_up, m.ids, c.experts, "bias,clamped_swiglu", "gate_up.biased",
                                {b.Param("gate_up_bias", {DType::kF32, {graph::Dim::Static(c.experts * 2 * c.width)}})},
                                clamp));
  auto g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  auto step = [&](int64_t tokens, uint32_t seed, uint32_t pos) { return MlpStep(c, tokens, seed, pos); };
  auto grouped = [](const std::vector<std::string>& variants) {
    int products = 0, sums = 0;
    for (const std::string& v : variants) {
      products += v.rfind("expert_matmul.grouped.", 0) == 0 ? 1 : 0;
      sums += v == "router.route_sum" ? 1 : 0;
    }
    return products == 3 && sums == 1;
  };
  // On NVIDIA the grouped products take f16 operands (the cooperative-matrix tiles) where the
  // weights are not f32: 3e-3 of the largest value, 4.6e-3 of the clamped ones' (Q5_K, H200).
  EXPECT_TRUE(grouped(Compare(*g, 80, {step(70, 10, 0), step(13, 20, 70)}, c.tolerance, std::nullopt, kClampSpread)));
  {
    test::ScopedTune tune("experts.grouped_from=1");
    EXPECT_TRUE(grouped(Compare(*g, 8, {step(5, 30, 0), step(1, 40, 5)}, c.tolerance, std::nullopt, kClampSpread)));
  }
  // Below the rows it groups from, the down product sums a token's slots itself.
  const std::vector<std::string> rows = Compare(*g, 8, {step(3, 50, 0)}, c.tolerance, std::nullopt, kClampSpread);
  EXPECT_FALSE(grouped(rows));
  EXPECT_EQ(std::count(rows.begin(), rows.end(), "router.route_sum"), 0);
}

// An MoE block as a decode step has it: a plain norm (the post-attention one) that the router and
// the gated expert product read, top_k, and the down product with its route sum; outputs the
// router's logits, h (unless `h_output` is false, as in a model) and y (with `residual`, the route
// sum plus x, as a model's residual stream adds it).
absl::StatusOr<graph::Graph> NormedMoeBlock(const ExpertCase& c, bool h_output = true, bool residual = false) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(c.hidden));
  ValueId normed = b.RmsNorm(x, b.Param("norm", test::Vector(c.hidden)), 1e-5, 1.0);
  ValueId logits = b.MatMul(normed, b.Param("router", Matrix(c.experts, c.hidden, DType::kF32)));
  b.Output("logits", logits);
  ValueId ids = b.TopK(logits, c.k);
  ValueId gate_up = b.Param("gate_up", Matrix(c.experts * 2 * c.width, c.hidden, c.dtype));
  ValueId down = b.Param("down", Matrix(c.experts * c.hidden, c.width, c.dtype));
  ValueId h = b.ExpertMatMul(normed, gate_up, ids, c.experts, "silu_mul");
  if (h_output) b.Output("h", h);
  ValueId y = b.RouteSum(b.ExpertMatMul(h, down, ids, c.experts), b.RouteWeights(logits, ids, "softmax_chosen"));
  b.Output("y", residual ? b.Add(y, x) : y);
  return std::move(b).Finish();
}
// A step of `tokens` random rows of the block's x at position `pos`.
Step BlockStep(const ExpertCase& c, int64_t tokens, uint32_t seed, uint32_t pos) {
  return Step{{{"x", RandomRows(tokens, c.hidden, seed)}}, pos};
}
// `g` after the pass `name`, verified.
absl::Status RunPass(graph::Graph& g, const std::string& name) {
  absl::StatusOr<std::unique_ptr<passes::Pass>> pass = passes::MakePass(name);
  if (!pass.ok()) return pass.status();
  if (absl::StatusOr<bool> changed = (*pass)->Run(g); !changed.ok()) return changed.status();
  return graph::Verify(g);
}
// Whether the weights have integer quants (the q8-activations pass gives their products q8 x).
bool IntegerQuants(DType dtype) { return dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16; }

// The plan's dispatches whose variant names `part`.
int64_t CountVariants(const std::vector<std::string>& variants, const std::string& part) {
  return std::count_if(variants.begin(), variants.end(),
                       [&](const std::string& v) { return v.find(part) != std::string::npos; });
}

// The residual add after the route sum, taken into it (the fuse-route-sum-residual pass): the
// down product adds x's row to the columns it writes where it computes the route sum (one row, 5
// and 1 of a bucket of 8, with and without subgroup arithmetic), the route sum's own dispatch adds
// it where it has one (the rule off; the products grouped at 70 rows), and the q8 kernel's
// epilogue, on x rounded through q8 blocks, adds it alike.
TEST_P(ExpertMatMulKernelTest, ARouteSumAddsItsResidual) {
  const ExpertCase& c = GetParam();
  absl::StatusOr<graph::Graph> block = NormedMoeBlock(c, /*h_output=*/false, /*residual=*/true);
  ASSERT_TRUE(block.ok()) << block.status();
  graph::Graph g = *block;
  ASSERT_TRUE(RunPass(g, "fuse-route-sum-residual").ok());
  const graph::Node& sum = g.node(*g.output("y"));
  ASSERT_EQ(sum.kind, graph::OpKind::kRouteSum);
  ASSERT_EQ(sum.inputs.size(), 3u);
  auto step = [&](int64_t tokens, uint32_t seed, uint32_t pos) { return BlockStep(c, tokens, seed, pos); };
  EXPECT_EQ(CountVariants(Compare(g, 1, {step(1, 10, 0), step(1, 20, 1)}, c.tolerance), "router.route_sum"), 0);
  EXPECT_EQ(CountVariants(Compare(g, 8, {step(5, 30, 0), step(1, 40, 5)}, c.tolerance), "router.route_sum"), 0);
  Compare(g, 1, {step(1, 50, 0)}, c.tolerance, WithoutSubgroupArithmetic());
  {
    const test::ScopedTune scoped("matmul.route_sum=0");
    EXPECT_EQ(CountVariants(Compare(g, 1, {step(1, 60, 0)}, c.tolerance), "router.route_sum"), 1);
  }
  EXPECT_EQ(CountVariants(Compare(g, 80, {step(70, 70, 0)}, c.tolerance), "router.route_sum"), 1);
  if (!IntegerQuants(c.dtype) || !ctx().info().int_dot_product) return;
  ASSERT_TRUE(RunPass(g, "q8-activations").ok());
  // As Q8ActivationsMatchTheInterpreter: both sides multiply the same quants, 1e-3 for a value that
  // rounds the other way.
  EXPECT_EQ(CountVariants(Compare(g, 1, {step(1, 80, 0), step(1, 90, 1)}, 1e-3), "+x_q8"), 2);
}

// x in planes between kernels (codegen/plane_x.h): at one row, where the expert products' parts
// are whole runs of a multiple of 4 values (MXFP4's blocks; plain floats whose rows are a multiple
// of 4 values), the router writes the norm's row and the gated product its columns in planes, and
// both products read their x there; with the rule off (matmul.planes_x=0), and elsewhere, in order.
// Either way the results are the interpreter's.
TEST_P(ExpertMatMulKernelTest, XLiesInPlanesBetweenTheExpertProducts) {
  const ExpertCase& c = GetParam();
  absl::StatusOr<graph::Graph> g = NormedMoeBlock(c, /*h_output=*/false);
  ASSERT_TRUE(g.ok()) << g.status();
  auto step = [&](int64_t tokens, uint32_t seed, uint32_t pos) { return BlockStep(c, tokens, seed, pos); };
  const bool planes =
      c.dtype == DType::kMXFP4 || (graph::IsFloat(c.dtype) && c.hidden % 4 == 0 && c.width % 4 == 0);
  for (const char* tune : {"", "matmul.planes_x=0"}) {
    SCOPED_TRACE(tune);
    const test::ScopedTune scoped(tune);
    const bool on = planes && tune[0] == '\0';
    std::vector<std::string> variants = Compare(*g, 1, {step(1, 10, 0), step(1, 20, 1)}, c.tolerance);
    EXPECT_EQ(CountVariants(variants, "+norm_out.xn_planes"), on ? 1 : 0);
    EXPECT_EQ(CountVariants(variants, ".y_planes"), on ? 1 : 0);
    EXPECT_EQ(CountVariants(variants, ".x_planes"), on ? 2 : 0);
    variants = Compare(*g, 1, {step(1, 30, 0)}, c.tolerance, WithoutSubgroupArithmetic());
    EXPECT_EQ(CountVariants(variants, ".x_planes"), on ? 2 : 0);
  }
  // At 8 rows the norm is a dispatch of its own, its row in order; h, between the products' rows of
  // the matrix-vector kernel, still lies in planes, a row of planes a token's slot.
  const std::vector<std::string> variants = Compare(*g, 8, {step(5, 40, 0), step(1, 50, 5)}, c.tolerance);
  EXPECT_EQ(CountVariants(variants, "+norm_out"), 0);
  EXPECT_EQ(CountVariants(variants, ".y_planes"), planes ? 1 : 0);
  EXPECT_EQ(CountVariants(variants, ".x_planes"), planes ? 1 : 0);
}

// A plain norm that the router and the expert product read (GPT-OSS's and Qwen3-MoE's
// post-attention norm; codegen/in_matmul.h's plain norm in x), at one row: by default the router
// computes it and its workgroups write its row, a share each; up to a bound on the expert product
// (experts.norm_upto) each reader computes it as it loads x (with and without subgroup arithmetic,
// and MXFP4's float dots beside the rule's); either way the norm has no dispatch. At more rows the
// readers take the norm's row from a dispatch of its own.
TEST_P(ExpertMatMulKernelTest, APlainNormIsComputedByItsReaders) {
  const ExpertCase& c = GetParam();
  absl::StatusOr<graph::Graph> g = NormedMoeBlock(c);
  ASSERT_TRUE(g.ok()) << g.status();
  auto step = [&](int64_t tokens, uint32_t seed, uint32_t pos) { return BlockStep(c, tokens, seed, pos); };
  for (const char* tune : {"experts.norm_upto=100000000", "experts.norm_upto=100000000,experts.half=0"}) {
    SCOPED_TRACE(tune);
    const test::ScopedTune scoped(tune);
    std::vector<std::string> variants = Compare(*g, 1, {step(1, 10, 0), step(1, 20, 1)}, c.tolerance);
    EXPECT_EQ(CountVariants(variants, "rms_norm."), 0);
    EXPECT_EQ(CountVariants(variants, "+plain_norm_x"), 2);
    variants = Compare(*g, 1, {step(1, 30, 0)}, c.tolerance, WithoutSubgroupArithmetic());
    EXPECT_EQ(CountVariants(variants, "+plain_norm_x"), 2);
  }
  // By default: the router computes it and writes its row; with a narrow router workgroup, each of
  // its invocations holds several parts of the row.
  for (const char* tune : {"", "gemv.wg=32"}) {
    SCOPED_TRACE(tune);
    const test::ScopedTune scoped(tune);
    std::vector<std::string> variants = Compare(*g, 1, {step(1, 60, 0), step(1, 70, 1)}, c.tolerance);
    EXPECT_EQ(CountVariants(variants, "rms_norm."), 0);
    EXPECT_EQ(CountVariants(variants, "+plain_norm_x"), 1);
    EXPECT_EQ(CountVariants(variants, "+norm_out"), 1);
    variants = Compare(*g, 1, {step(1, 80, 0)}, c.tolerance, WithoutSubgroupArithmetic());
    EXPECT_EQ(CountVariants(variants, "+norm_out"), 1);
  }
  const std::vector<std::string> variants = Compare(*g, 8, {step(5, 40, 0), step(1, 50, 5)}, c.tolerance);
  EXPECT_EQ(CountVariants(variants, "rms_norm."), 1);
  EXPECT_EQ(CountVariants(variants, "+plain_norm_x"), 0);
}

// x rounded through q8 blocks (the q8-activations pass, as decode steps take it): the expert
// products' matrix-vector kernel stages x as q8 and takes integer dot products, against the
// interpreter rounding x alike: an MoE block with its post-attention norm, router and route sum, at
// one row (the norm computed by its readers, the experts ranked by the first product, the route sum
// by the down product, which stages every slot's row) and at 5 and then 1 rows of a bucket of 8;
// with and without subgroup arithmetic and shuffles, and with the route sum a dispatch of its own
// (each down workgroup staging its slot's row). Float weights keep exact x.
TEST_P(ExpertMatMulKernelTest, Q8ActivationsMatchTheInterpreter) {
  const ExpertCase& c = GetParam();
  if (!ctx().info().int_dot_product) GTEST_FAIL() << "the device has no integer dot products";
  absl::StatusOr<graph::Graph> exact = NormedMoeBlock(c);
  ASSERT_TRUE(exact.ok()) << exact.status();
  graph::Graph g = *exact;
  ASSERT_TRUE(RunPass(g, "q8-activations").ok());
  const bool integer_quants = IntegerQuants(c.dtype);
  EXPECT_EQ(g.node(*g.output("h")).attrs.Has("x_quant"), integer_quants);
  if (!integer_quants) return;
  auto step = [&](int64_t tokens, uint32_t seed, uint32_t pos) { return BlockStep(c, tokens, seed, pos); };
  // The rounding moves the results far more than the tolerance below: the test tells q8 from exact x.
  test::RandomParams params(g, 77);
  auto rounded = graph::Interpreter(params).Run(g, step(1, 10, 0).first, 0);
  auto unrounded = graph::Interpreter(params).Run(*exact, step(1, 10, 0).first, 0);
  ASSERT_TRUE(rounded.ok() && unrounded.ok());
  EXPECT_GE(test::RelativeError(unrounded->at("y").f, rounded->at("y").f), 3e-3);
  codegen::TargetCaps portable = vk::TargetCapsOf(ctx().info());
  portable.subgroup_arithmetic = false;
  portable.subgroup_shuffle = false;
  // Both sides multiply the same 8-bit quants; the kernels round x·g / d where the norm is theirs
  // (1 / rms applied to the sums) and h as the GPU computed it, within an ulp of the interpreter's
  // and its rounding: a value that close to a half may round the other way, moving one product by
  // d·w (under 1e-3 of the largest result).
  constexpr double kTolerance = 1e-3;
  for (const char* tune : {"", "matmul.route_sum=0"}) {
    const test::ScopedTune scoped(tune);
    for (const std::optional<codegen::TargetCaps>& caps : {std::optional<codegen::TargetCaps>(), std::optional(portable)}) {
      for (const auto& [bucket, steps] : {std::pair<int64_t, std::vector<Step>>{1, {step(1, 10, 0), step(1, 20, 1)}},
                                          {8, {step(5, 30, 0), step(1, 40, 5)}}}) {
        SCOPED_TRACE(absl::StrCat(tune, " bucket ", bucket, caps ? " portable" : ""));
        const std::vector<std::string> variants = Compare(g, bucket, steps, kTolerance, caps);
        EXPECT_EQ(std::count_if(variants.begin(), variants.end(),
                                [](const std::string& v) { return v.find("+x_q8") != std::string::npos; }),
                  2);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, ExpertMatMulKernelTest,
                         ::testing::Values(ExpertCase{DType::kF32, 5, 3, 75, 37, 1e-5},
                                           ExpertCase{DType::kF16, 6, 2, 139, 21, 1e-5},
                                           ExpertCase{DType::kF16, 4, 2, 128, 64, 1e-5},
                                           ExpertCase{DType::kBF16, 3, 3, 130, 17, 1e-5},
                                           ExpertCase{DType::kQ8_0, 7, 2, 160, 96, 1e-5},
                                           ExpertCase{DType::kQ4_K, 3, 2, 256, 256, 1e-5},
                                           ExpertCase{DType::kQ5_K, 3, 2, 256, 256, 1e-5},
                                           ExpertCase{DType::kQ6_K, 4, 3, 256, 256, 1e-5},
                                           ExpertCase{DType::kQ5_0, 5, 2, 96, 64, 1e-5},
                                           ExpertCase{DType::kMXFP4, 4, 2, 160, 96, 1e-5}),
                         [](const ::testing::TestParamInfo<ExpertCase>& i) {
                           return absl::StrCat(graph::Name(i.param.dtype), "_k", i.param.hidden);
                         });

}  // namespace
}  // namespace doppler
