// The mixture-of-experts ops (top_k, route_weights, expert_matmul): their types and their meaning
// in the interpreter, on small cases worked by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>

#include "graph/builder.h"
#include "graph/expert_types.h"
#include "graph/interpreter.h"

namespace doppler::graph {
namespace {

TensorType Rows(int64_t cols, DType t = DType::kF32) { return {t, {Dim::Tokens(), Dim::Static(cols)}}; }
TensorType Mat(int64_t r, int64_t c) { return {DType::kF32, {Dim::Static(r), Dim::Static(c)}}; }

class MapParams : public ParamSource {
 public:
  explicit MapParams(std::map<std::string, std::vector<float>> values) : values_(std::move(values)) {}
  absl::StatusOr<std::vector<float>> Float32(const Node& param) const override {
    return values_.at(param.attrs.Str("name"));
  }

 private:
  std::map<std::string, std::vector<float>> values_;
};

// Runs a graph whose inputs are "x" (f32 [T, cols]) and, when given, "ids" (i32 [T, k]).
absl::StatusOr<std::map<std::string, Tensor>> RunGraph(const Graph& g, const ParamSource& params, Tensor x,
                                                  std::optional<Tensor> ids = std::nullopt) {
  Interpreter interp(params);
  std::map<std::string, Tensor> inputs{{"x", std::move(x)}};
  if (ids) inputs["ids"] = *std::move(ids);
  return interp.Run(g, inputs, 0);
}

TEST(ExpertOps, TopKTakesTheLargestFirstAndTiesToTheLowerIndex) {
  GraphBuilder b;
  b.Output("ids", b.TopK(b.Input("x", Rows(4)), 2));
  absl::StatusOr<Graph> g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->node(1).type, Rows(2, DType::kI32));
  MapParams none({});
  auto out = RunGraph(*g, none, Tensor::F32({2, 4}, {1, 3, 2, 3, 0.5f, -1, 4, 0}));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->at("ids").i, (std::vector<int32_t>{1, 3, 2, 0}));
}

TEST(ExpertOps, RouteWeightsSoftmaxOverTheChosenOrOverAll) {
  GraphBuilder b;
  ValueId logits = b.Input("x", Rows(4));
  ValueId ids = b.Input("ids", Rows(2, DType::kI32));
  b.Output("chosen", b.RouteWeights(logits, ids, "softmax_chosen"));
  b.Output("all", b.RouteWeights(logits, ids, "softmax_all"));
  absl::StatusOr<Graph> g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  MapParams none({});
  auto out = RunGraph(*g, none, Tensor::F32({2, 4}, {1, 3, 2, 3, 0.5f, -1, 4, 0}), Tensor::I32({2, 2}, {1, 3, 2, 0}));
  ASSERT_TRUE(out.ok()) << out.status();
  const double e4 = std::exp(4.0), e05 = std::exp(0.5);
  const std::vector<double> chosen = {0.5, 0.5, e4 / (e4 + e05), e05 / (e4 + e05)};
  const double all0 = std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0), all1 = e05 + std::exp(-1.0) + e4 + 1.0;
  const std::vector<double> all = {std::exp(3.0) / all0, std::exp(3.0) / all0, e4 / all1, e05 / all1};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(out->at("chosen").f[i], chosen[i], 1e-6) << i;
    EXPECT_NEAR(out->at("all").f[i], all[i], 1e-6) << i;
  }
}

// Three experts of two rows over K = 3, stacked.
const std::vector<float> kStacked = {1, 0, 0, 0, 1, 0,    // expert 0
                                     0, 0, 1, 1, 1, 1,    // expert 1
                                     2, 0, 0, 0, 0, -1};  // expert 2

TEST(ExpertOps, ExpertMatMulAppliesEachSlotsExpert) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(3));
  ValueId ids = b.Input("ids", Rows(2, DType::kI32));
  ValueId w = b.Param("w", Mat(6, 3));
  ValueId y = b.ExpertMatMul(x, w, ids, 3);
  b.Output("y", y);
  b.Output("sum", b.RouteSum(y, b.Input("weights", Rows(2))));
  absl::StatusOr<Graph> g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->node(*g->output("y")).type, Rows(4));
  EXPECT_EQ(g->node(*g->output("sum")).type, Rows(2));
  MapParams params({{"w", kStacked}});
  Interpreter interp(params);
  auto out = interp.Run(*g,
                        {{"x", Tensor::F32({2, 3}, {1, 2, 3, -1, 0.5f, 2})},
                         {"ids", Tensor::I32({2, 2}, {2, 0, 1, 2})},
                         {"weights", Tensor::F32({2, 2}, {0.25f, 0.75f, 0.5f, 0.5f})}},
                        0);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->at("y").f, (std::vector<float>{2, -3, 1, 2, 2, 1.5f, -2, -2}));
  EXPECT_EQ(out->at("sum").f, (std::vector<float>{1.25f, 0.75f, 0, -0.25f}));
}

TEST(ExpertOps, ExpertMatMulReadsASlotsOwnInputAndGates) {
  GraphBuilder b;
  ValueId ids = b.Input("ids", Rows(2, DType::kI32));
  ValueId w = b.Param("w", Mat(6, 3));
  // x holds one input per slot: [x_0 | x_1].
  b.Output("y", b.ExpertMatMul(b.Input("x", Rows(6)), w, ids, 3));
  // Gated: each expert's two rows are [gate | up], y = silu(gate · x) * (up · x).
  b.Output("gated", b.ExpertMatMul(b.Input("x3", Rows(3)), w, ids, 3, "silu_mul"));
  absl::StatusOr<Graph> g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->node(*g->output("gated")).type, Rows(2));
  MapParams params({{"w", kStacked}});
  Interpreter interp(params);
  auto out = interp.Run(*g,
                        {{"x", Tensor::F32({1, 6}, {1, 2, 3, 0, 1, 0})},
                         {"x3", Tensor::F32({1, 3}, {1, 2, 3})},
                         {"ids", Tensor::I32({1, 2}, {2, 1})}},
                        0);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->at("y").f, (std::vector<float>{2, -3, 0, 1}));
  auto silu = [](double v) { return v / (1.0 + std::exp(-v)); };
  EXPECT_NEAR(out->at("gated").f[0], silu(2.0) * -3.0, 1e-5);  // expert 2: gate 2, up -3
  EXPECT_NEAR(out->at("gated").f[1], silu(3.0) * 6.0, 1e-5);   // expert 1: gate 3, up 6
}

TEST(ExpertOps, AnExpertIdOutOfRangeIsAnError) {
  GraphBuilder b;
  b.Output("y", b.ExpertMatMul(b.Input("x", Rows(3)), b.Param("w", Mat(6, 3)), b.Input("ids", Rows(1, DType::kI32)), 3));
  absl::StatusOr<Graph> g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  MapParams params({{"w", kStacked}});
  auto out = RunGraph(*g, params, Tensor::F32({1, 3}, {1, 2, 3}), Tensor::I32({1, 1}, {3}));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("expert id 3"), std::string::npos) << out.status();
}

TEST(ExpertOps, BadShapesAreTypeErrors) {
  auto error = [](auto build) {
    GraphBuilder b;
    build(b);
    return std::string(std::move(b).Finish().status().message());
  };
  EXPECT_NE(error([](GraphBuilder& b) { b.TopK(b.Input("x", Rows(4)), 5); }).find("k 5"), std::string::npos);
  EXPECT_NE(error([](GraphBuilder& b) {
              b.RouteWeights(b.Input("x", Rows(4)), b.Input("ids", Rows(2, DType::kI32)), "sigmoid");
            }).find("weighting 'sigmoid'"),
            std::string::npos);
  // 6 rows are not a whole number of rows for 4 experts.
  EXPECT_NE(error([](GraphBuilder& b) {
              b.ExpertMatMul(b.Input("x", Rows(3)), b.Param("w", Mat(6, 3)), b.Input("ids", Rows(2, DType::kI32)), 4);
            }).find("stacked weight"),
            std::string::npos);
  // x must be [T, K] or [T, k*K].
  EXPECT_NE(error([](GraphBuilder& b) {
              b.ExpertMatMul(b.Input("x", Rows(4)), b.Param("w", Mat(6, 3)), b.Input("ids", Rows(2, DType::kI32)), 3);
            }).find("x must be"),
            std::string::npos);
  // The route weights must be [T, k], and y's width a multiple of k.
  EXPECT_NE(error([](GraphBuilder& b) { b.RouteSum(b.Input("y", Rows(6)), b.Input("weights", Rows(2, DType::kI32))); })
                .find("route weights"),
            std::string::npos);
  EXPECT_NE(error([](GraphBuilder& b) { b.RouteSum(b.Input("y", Rows(7)), b.Input("weights", Rows(2))); }).find("y must be"),
            std::string::npos);
  // A residual (fuse-route-sum-residual's third input) is a row of the sum's width.
  const TensorType y = Rows(6), w = Rows(2);
  EXPECT_TRUE(InferExpertOpType(OpKind::kRouteSum, {y, w, Rows(3)}, {}).ok());
  absl::StatusOr<TensorType> wide = InferExpertOpType(OpKind::kRouteSum, {y, w, Rows(6)}, {});
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(std::string(wide.status().message()).find("the residual must be"), std::string::npos);
  EXPECT_FALSE(InferExpertOpType(OpKind::kRouteSum, {y, w, Rows(3), Rows(3)}, {}).ok());
}

}  // namespace
}  // namespace doppler::graph
