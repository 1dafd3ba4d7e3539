// Which nodes a matmul's kernel computes besides its own (codegen/in_matmul.h), decided by
// lowering from the graph and the bucket: a tail, a norm in x, a last row in x, a route sum, a top_k
// in its readers; each where the graph allows it and nowhere else, each turned off by its
// DOPPLER_TUNE key, and lowering giving such a node no dispatch of its own. (The kernels that
// compute them, against the interpreter: quant_kernel_test.cc, expert_kernel_test.cc.)
#include "codegen/in_matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "codegen/lowering.h"
#include "graph/builder.h"
#include "graph/verifier.h"
#include "passes/pass.h"
#include "tests/support/graph_values.h"
#include "tests/support/scoped_tune.h"

namespace doppler {
namespace {

using codegen::InMatMulRules;
using graph::DType;
using graph::ValueId;

// The builder's graph with its matmuls' x rounded through q8 (the q8-activations pass).
graph::Graph WithQ8Activations(graph::GraphBuilder b) {
  graph::Graph g = *std::move(b).Finish();
  auto pass = passes::MakePass("q8-activations");
  EXPECT_TRUE(pass.ok() && (*pass)->Run(g).ok());
  EXPECT_TRUE(graph::Verify(g).ok());
  return g;
}

TEST(InMatMul, ATailIsTheArgmaxOrWholeRowNormOfAQ8MatmulsRows) {
  graph::GraphBuilder b;
  ValueId x = b.Input("x", test::Rows(96));
  ValueId logits = b.MatMul(x, b.Param("w", test::Matrix(40, 96, DType::kQ8_0)));
  b.Output("of_matmul", b.Argmax(logits));
  b.Output("of_add", b.Argmax(b.Add(logits, logits)));
  ValueId o = b.MatMul(x, b.Param("wo", test::Matrix(24, 96, DType::kQ4_0)));
  b.Output("normed", b.RmsNorm(o, b.Param("g", test::Vector(24)), 1e-6, 1.0));
  ValueId f = b.MatMul(x, b.Param("wf", test::Matrix(24, 96, DType::kF16)));
  b.Output("of_f16", b.Argmax(f));
  const graph::Graph g = WithQ8Activations(std::move(b));
  const InMatMulRules rules;
  auto tail = [&](const char* name, int64_t tokens) {
    return codegen::TailInMatMul(g, g.node(*g.output(name)), tokens, rules);
  };
  EXPECT_TRUE(tail("of_matmul", 1));
  EXPECT_TRUE(tail("of_matmul", 13));
  EXPECT_TRUE(tail("normed", 1));
  EXPECT_FALSE(tail("of_add", 1)) << "an add's rows";
  EXPECT_FALSE(tail("of_f16", 1)) << "a matmul whose x is not rounded through q8: no variant takes a tail";
  EXPECT_FALSE(tail("of_matmul", 64)) << "more rows than the q8 matrix-vector kernel takes";
  EXPECT_FALSE(codegen::TailInMatMul(g, g.node(*g.output("of_matmul")), 1, InMatMulRules{.tail = false}));
}

TEST(InMatMul, ANormInXIsAResidualNormWhoseNormalisedSumMatrixVectorMatmulsAloneRead) {
  graph::GraphBuilder b;
  const auto row = test::Rows(64);
  auto residual_norm = [&](const std::string& name) {
    return b.RmsNormResidual(b.Input(name + "_x", row), b.Param(name + "_g", test::Vector(64)),
                             b.Input(name + "_r", row), 1e-6, 1.0);
  };
  // Read by one matmul as x: taken. Its sum (part 0) may have any readers.
  ValueId alone = residual_norm("alone");
  b.Output("alone_y", b.MatMul(b.Part(alone, 1), b.Param("w1", test::Matrix(8, 64, DType::kQ8_0))));
  b.Output("alone_sum", b.Part(alone, 0));
  // Read by two matmuls as x (a layer's projections of two weight types): taken.
  ValueId twice = residual_norm("twice");
  b.Output("twice_a", b.MatMul(b.Part(twice, 1), b.Param("w2", test::Matrix(8, 64, DType::kQ8_0))));
  b.Output("twice_b", b.MatMul(b.Part(twice, 1), b.Param("w3", test::Matrix(8, 64, DType::kQ5_0))));
  // Read by a matmul and an add, or as a step output: not. By a float matmul: at one row only.
  ValueId added = residual_norm("added");
  ValueId added_part = b.Part(added, 1);
  b.Output("added_y", b.MatMul(added_part, b.Param("w4", test::Matrix(8, 64, DType::kQ8_0))));
  b.Output("added_sum", b.Add(added_part, added_part));
  ValueId output = residual_norm("output");
  ValueId output_part = b.Part(output, 1);
  b.Output("output_y", b.MatMul(output_part, b.Param("w5", test::Matrix(8, 64, DType::kQ8_0))));
  b.Output("output_normed", output_part);
  ValueId f16 = residual_norm("f16");
  b.Output("f16_y", b.MatMul(b.Part(f16, 1), b.Param("w6", test::Matrix(8, 64, DType::kF16))));
  // Its sum read before the matmul in the graph's order: not (the matmul's kernel writes the sum).
  ValueId early = residual_norm("early");
  ValueId early_sum = b.Part(early, 0), early_part = b.Part(early, 1);
  b.Output("early_twice", b.Add(early_sum, early_sum));
  b.Output("early_y", b.MatMul(early_part, b.Param("w7", test::Matrix(8, 64, DType::kQ8_0))));
  const graph::Graph g = WithQ8Activations(std::move(b));
  const InMatMulRules rules;
  EXPECT_TRUE(codegen::NormInX(g, g.node(alone), 1, rules));
  EXPECT_TRUE(codegen::NormInX(g, g.node(twice), 4, rules));
  for (ValueId n : {added, output, early}) EXPECT_FALSE(codegen::NormInX(g, g.node(n), 1, rules)) << g.node(n).label;
  EXPECT_TRUE(codegen::NormInX(g, g.node(f16), 1, rules));
  EXPECT_FALSE(codegen::NormInX(g, g.node(f16), 4, rules));
  EXPECT_FALSE(codegen::NormInX(g, g.node(alone), 1, InMatMulRules{.norm_in_x = false}));
}

TEST(InMatMul, APlainNormInXIsOneThatAnExpertProductAndFloatMatmulsRead) {
  graph::GraphBuilder b;
  const auto row = test::Rows(64);
  auto norm = [&](const std::string& name) {
    return b.RmsNorm(b.Input(name + "_x", row), b.Param(name + "_g", test::Vector(64)), 1e-6, 0.0);
  };
  // The router (f32) and the gated expert product, from the q8 matmul that writes x: taken, and
  // the q8 matmul's norm tail is not.
  ValueId o = b.MatMul(b.Input("o_x", row), b.Param("wo", test::Matrix(64, 64, DType::kQ4_0)));
  ValueId routed = b.RmsNorm(o, b.Param("routed_g", test::Vector(64)), 1e-6, 0.0);
  auto experts = [&](const std::string& name, ValueId x, DType router) {
    ValueId logits = b.MatMul(x, b.Param(name + "_router", test::Matrix(6, 64, router)));
    b.Output(name + "_y", b.ExpertMatMul(x, b.Param(name + "_w", test::Matrix(6 * 16, 64, DType::kQ8_0)),
                                         b.TopK(logits, 2), 6, "silu_mul"));
  };
  experts("routed", routed, DType::kF32);
  // A quantized router (the q8 kernel), a reader that is no product, a step output, or matmuls
  // alone (fuse-norm-matmul's): not.
  ValueId quant = norm("quant");
  experts("quant", quant, DType::kQ8_0);
  ValueId added = norm("added");
  experts("added", added, DType::kF16);
  b.Output("added_sum", b.Add(added, added));
  ValueId output = norm("output");
  experts("output", output, DType::kF32);
  b.Output("output_normed", output);
  ValueId matmuls = norm("matmuls");
  b.Output("matmuls_y", b.MatMul(matmuls, b.Param("wm", test::Matrix(8, 64, DType::kF16))));
  // The expert product before the router in the graph's order: its readers may compute it, but the
  // router cannot write it for the product.
  ValueId late = norm("late");
  b.Output("late_y", b.ExpertMatMul(late, b.Param("late_w", test::Matrix(6 * 16, 64, DType::kQ8_0)),
                                    b.TopK(b.Input("late_logits", test::Rows(6)), 2), 6, "silu_mul"));
  b.Output("late_r", b.MatMul(late, b.Param("late_router", test::Matrix(6, 64, DType::kF32))));
  const graph::Graph g = WithQ8Activations(std::move(b));
  // The readers compute it for expert products of at most a bound of weight values a token (none by
  // default: the router writes it, below); here a bound above every product's.
  std::optional<test::ScopedTune> readers_tune;
  readers_tune.emplace("experts.norm_upto=1000000");
  absl::StatusOr<InMatMulRules> rules = codegen::InMatMulRulesFromTune();
  ASSERT_TRUE(rules.ok()) << rules.status();
  EXPECT_TRUE(codegen::PlainNormInX(g, g.node(routed), 1, *rules));
  EXPECT_FALSE(codegen::TailInMatMul(g, g.node(routed), 1, *rules));
  InMatMulRules off = *rules;
  off.plain_norm_in_x = false;
  EXPECT_FALSE(codegen::PlainNormInX(g, g.node(routed), 1, off));
  EXPECT_TRUE(codegen::TailInMatMul(g, g.node(routed), 1, off));
  // Past one row, and where the expert product groups its rows.
  EXPECT_FALSE(codegen::PlainNormInX(g, g.node(routed), 2, *rules));
  EXPECT_FALSE(codegen::PlainNormInX(g, g.node(routed), 16, *rules));
  // (A product of x rounded through q8 never groups them: the matrix-vector pass takes it.)
  InMatMulRules grouped = *rules;
  grouped.experts_grouped_from = 1;
  EXPECT_TRUE(codegen::PlainNormInX(g, g.node(routed), 1, grouped));
  graph::Graph exact = g;
  exact.mutable_node(*g.output("routed_y")).attrs.Erase("x_quant");
  EXPECT_FALSE(codegen::PlainNormInX(exact, exact.node(routed), 1, grouped));
  // Past the expert weight values a token reads: 2 slots of 16 rows of 64.
  InMatMulRules bounded = *rules;
  bounded.plain_norm_experts_upto = 2 * 16 * 64;
  EXPECT_TRUE(codegen::PlainNormInX(g, g.node(routed), 1, bounded));
  EXPECT_FALSE(codegen::PlainNormInFloatReader(g, g.node(routed), 1, bounded));
  bounded.plain_norm_experts_upto = 2 * 16 * 64 - 1;
  EXPECT_FALSE(codegen::PlainNormInX(g, g.node(routed), 1, bounded));
  // Past the bound, the router (the norm's first reader) computes the norm and writes its row.
  EXPECT_TRUE(codegen::PlainNormInFloatReader(g, g.node(routed), 1, bounded));
  EXPECT_FALSE(codegen::PlainNormInFloatReader(g, g.node(routed), 2, bounded));
  EXPECT_FALSE(codegen::TailInMatMul(g, g.node(routed), 1, bounded));
  InMatMulRules bounded_off = bounded;
  bounded_off.plain_norm_in_x = false;
  EXPECT_FALSE(codegen::PlainNormInFloatReader(g, g.node(routed), 1, bounded_off));
  for (ValueId n : {quant, added, output, matmuls}) {
    EXPECT_FALSE(codegen::PlainNormInX(g, g.node(n), 1, *rules)) << g.node(n).label;
    EXPECT_FALSE(codegen::PlainNormInFloatReader(g, g.node(n), 1, bounded)) << g.node(n).label;
  }
  EXPECT_TRUE(codegen::PlainNormInX(g, g.node(late), 1, *rules));
  EXPECT_FALSE(codegen::PlainNormInFloatReader(g, g.node(late), 1, bounded));
  // Lowering: the norm has no dispatch; the router's and the expert product's cover it.
  codegen::TargetCaps caps;
  caps.integer_dot_product = true;  // the q8 matmuls'
  absl::StatusOr<std::vector<codegen::Dispatch>> decode = codegen::Lower(g, caps, 1);
  ASSERT_TRUE(decode.ok()) << decode.status();
  int covering = 0;
  for (const codegen::Dispatch& d : *decode) {
    EXPECT_NE(d.node, routed);
    if (std::find(d.covers.begin(), d.covers.end(), routed) == d.covers.end()) continue;
    ++covering;
    EXPECT_NE(d.kernel.variant.find("+plain_norm_x"), std::string::npos) << d.kernel.variant;
  }
  EXPECT_EQ(covering, 2);
  readers_tune.reset();
  {
    // By default (and past a bound): the router's dispatch alone covers it, writing its row, which
    // the expert product reads as x.
    absl::StatusOr<std::vector<codegen::Dispatch>> written = codegen::Lower(g, caps, 1);
    ASSERT_TRUE(written.ok()) << written.status();
    covering = 0;
    for (const codegen::Dispatch& d : *written) {
      EXPECT_NE(d.node, routed);
      if (d.kernel.family == "expert_matmul" && g.node(d.node).inputs[0] == routed) {
        EXPECT_EQ(d.kernel.variant.find("+plain_norm_x"), std::string::npos) << d.kernel.variant;
        EXPECT_EQ(d.kernel.args[1].value, routed);
      }
      if (std::find(d.covers.begin(), d.covers.end(), routed) == d.covers.end()) continue;
      ++covering;
      EXPECT_NE(d.kernel.variant.find("+plain_norm_x"), std::string::npos) << d.kernel.variant;
      EXPECT_NE(d.kernel.variant.find("+norm_out"), std::string::npos) << d.kernel.variant;
      EXPECT_TRUE(d.kernel.args.back().value == routed && d.kernel.args.back().written);
    }
    EXPECT_EQ(covering, 1);
  }
  {
    const test::ScopedTune tune("experts.norm_upto=2048");
    absl::StatusOr<InMatMulRules> tuned = codegen::InMatMulRulesFromTune();
    ASSERT_TRUE(tuned.ok()) << tuned.status();
    EXPECT_EQ(tuned->plain_norm_experts_upto, 2048);
  }
  const test::ScopedTune tune("experts.norm_upto=-1");
  absl::StatusOr<InMatMulRules> bad = codegen::InMatMulRulesFromTune();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("experts.norm_upto=-1 is not at least 0"), std::string::npos) << bad.status();
}

TEST(InMatMul, ALastRowInXIsOneThatOneMatmulAloneReadsAsX) {
  graph::GraphBuilder b;
  const auto row = test::Rows(64);
  // Read by one matmul as x (of any weight type): taken.
  ValueId alone = b.LastRow(b.Input("alone_x", row));
  b.Output("alone_y", b.MatMul(alone, b.Param("w1", test::Matrix(8, 64, DType::kF16))));
  // Read by a matmul and an add, by two matmuls, or as a step output: not.
  ValueId added = b.LastRow(b.Input("added_x", row));
  b.Output("added_y", b.MatMul(added, b.Param("w2", test::Matrix(8, 64, DType::kQ8_0))));
  b.Output("added_sum", b.Add(added, added));
  ValueId twice = b.LastRow(b.Input("twice_x", row));
  b.Output("twice_a", b.MatMul(twice, b.Param("w3", test::Matrix(8, 64, DType::kQ8_0))));
  b.Output("twice_b", b.MatMul(twice, b.Param("w4", test::Matrix(8, 64, DType::kQ8_0))));
  ValueId output = b.LastRow(b.Input("output_x", row));
  b.Output("output_y", b.MatMul(output, b.Param("w5", test::Matrix(8, 64, DType::kQ8_0))));
  b.Output("output_row", output);
  const graph::Graph g = *std::move(b).Finish();
  const InMatMulRules rules;
  EXPECT_TRUE(codegen::LastRowInX(g, g.node(alone), rules));
  for (ValueId n : {added, twice, output}) EXPECT_FALSE(codegen::LastRowInX(g, g.node(n), rules)) << g.node(n).label;
  EXPECT_FALSE(codegen::LastRowInX(g, g.node(alone), InMatMulRules{.last_row_in_x = false}));
}

TEST(InMatMul, DopplerTuneTurnsEachRuleOff) {
  {
    const test::ScopedTune tune("matmul.tail=0, matmul.last_row_in_x=1");
    absl::StatusOr<InMatMulRules> rules = codegen::InMatMulRulesFromTune();
    ASSERT_TRUE(rules.ok()) << rules.status();
    EXPECT_FALSE(rules->tail);
    EXPECT_TRUE(rules->norm_in_x);
    EXPECT_TRUE(rules->last_row_in_x);
  }
  const test::ScopedTune tune("matmul.norm_in_x=2");
  absl::StatusOr<InMatMulRules> rules = codegen::InMatMulRulesFromTune();
  ASSERT_FALSE(rules.ok());
  EXPECT_NE(rules.status().message().find("matmul.norm_in_x=2 is not 0 or 1"), std::string::npos) << rules.status();
}

// Lowering gives a node a matmul's kernel computes no dispatch, and the matmul's dispatch covers it.
TEST(InMatMul, LoweringCoversTheTailWithTheMatmulsDispatch) {
  graph::GraphBuilder b;
  ValueId h = b.Input("h", test::Rows(96));
  ValueId logits = b.MatMul(b.LastRow(h), b.Param("w", test::Matrix(40, 96, DType::kQ8_0)));
  b.Output("next", b.Argmax(logits));
  const graph::Graph g = WithQ8Activations(std::move(b));
  const ValueId next = *g.output("next");
  codegen::TargetCaps caps;
  caps.integer_dot_product = true;
  absl::StatusOr<std::vector<codegen::Dispatch>> fused = codegen::Lower(g, caps, 4);
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_EQ(fused->size(), 1u);
  EXPECT_EQ((*fused)[0].node, logits);
  EXPECT_EQ((*fused)[0].covers, (std::vector<ValueId>{logits, g.node(logits).inputs[0], next}));
  EXPECT_NE((*fused)[0].kernel.variant.find("+last_row"), std::string::npos) << (*fused)[0].kernel.variant;
  EXPECT_NE((*fused)[0].kernel.variant.find("+argmax"), std::string::npos) << (*fused)[0].kernel.variant;

  const test::ScopedTune tune("matmul.tail=0,matmul.last_row_in_x=0");
  absl::StatusOr<std::vector<codegen::Dispatch>> plain = codegen::Lower(g, caps, 4);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_EQ(plain->size(), 3u);
  EXPECT_EQ((*plain)[2].node, next);
  for (const codegen::Dispatch& d : *plain) EXPECT_EQ(d.covers, std::vector<ValueId>{d.node});
}

// A router's inputs for the tests below: x of 96 values a row, 5 experts, the top 2.
struct Routed {
  ValueId x, ids, weights;
};
Routed Route(graph::GraphBuilder& b) {
  ValueId x = b.Input("x", test::Rows(96));
  ValueId logits = b.Input("logits", test::Rows(5));
  ValueId ids = b.TopK(logits, 2);
  return {x, ids, b.RouteWeights(logits, ids, "softmax_chosen")};
}

// A route_sum is computed by the expert product it sums where that product takes a row at a time
// (below tuning::kExpertsGroupedFrom rows, or DOPPLER_TUNE's experts.grouped_from), and is a
// dispatch of its own where the product groups its rows by expert, or where another node reads the
// slots.

TEST(InMatMul, ARouteSumIsTheExpertProductsWhereItTakesARowAtATime) {
  graph::GraphBuilder b;
  const auto [x, ids, weights] = Route(b);
  ValueId down = b.ExpertMatMul(x, b.Param("w", test::Matrix(5 * 24, 96, DType::kQ8_0)), ids, 5);
  ValueId sum = b.RouteSum(down, weights);
  b.Output("y", sum);
  ValueId seen = b.ExpertMatMul(x, b.Param("w2", test::Matrix(5 * 24, 96, DType::kQ8_0)), ids, 5);
  b.Output("slots", seen);
  b.Output("y2", b.RouteSum(seen, weights));
  const graph::Graph g = *std::move(b).Finish();
  absl::StatusOr<InMatMulRules> rules = codegen::InMatMulRulesFromTune();
  ASSERT_TRUE(rules.ok()) << rules.status();
  EXPECT_EQ(rules->experts_grouped_from, 64);
  EXPECT_TRUE(codegen::RouteSumInExperts(g, g.node(sum), 1, *rules));
  EXPECT_TRUE(codegen::RouteSumInExperts(g, g.node(sum), 63, *rules));
  EXPECT_FALSE(codegen::RouteSumInExperts(g, g.node(sum), 64, *rules)) << "the product groups its rows";
  EXPECT_TRUE(codegen::ExpertsGrouped(g.node(down), 64, *rules));
  EXPECT_FALSE(codegen::RouteSumInExperts(g, g.node(*g.output("y2")), 1, *rules)) << "the slots are an output";
  EXPECT_FALSE(codegen::RouteSumInExperts(g, g.node(sum), 1, InMatMulRules{.route_sum = false}));

  // Lowering: one dispatch computes the product and its sum, writing the sum.
  absl::StatusOr<std::vector<codegen::Dispatch>> decode = codegen::Lower(g, codegen::TargetCaps{}, 1);
  ASSERT_TRUE(decode.ok()) << decode.status();
  int sums = 0;
  for (const codegen::Dispatch& d : *decode) {
    sums += d.node == sum ? 1 : 0;
    if (d.node != down) continue;
    EXPECT_EQ(d.covers, (std::vector<ValueId>{down, sum}));
    EXPECT_EQ(d.kernel.args[0].value, sum);
    EXPECT_NE(d.kernel.variant.find(".sum"), std::string::npos) << d.kernel.variant;
  }
  EXPECT_EQ(sums, 0);
  {
    const test::ScopedTune tune("experts.grouped_from=1");
    absl::StatusOr<std::vector<codegen::Dispatch>> grouped = codegen::Lower(g, codegen::TargetCaps{}, 1);
    ASSERT_TRUE(grouped.ok()) << grouped.status();
    for (const codegen::Dispatch& d : *grouped) {
      if (d.node == down) {
        EXPECT_EQ(d.kernel.variant.rfind("grouped.gemm.", 0), 0u) << d.kernel.variant;
      }
      sums += d.node == sum ? 1 : 0;
    }
    EXPECT_EQ(sums, 1);
  }
  const test::ScopedTune tune("experts.grouped_from=0");
  EXPECT_FALSE(codegen::InMatMulRulesFromTune().ok());
}

// The kernel sums the slots' dot products before its epilogue: an epilogue with an activation
// keeps the route_sum a dispatch of its own; biases alone do not.
TEST(InMatMul, ARouteSumStaysOutOfAnExpertProductWhoseEpilogueIsNotAffine) {
  graph::GraphBuilder b;
  const auto [x, ids, weights] = Route(b);
  ValueId bias = b.Param("b", {DType::kF32, {graph::Dim::Static(5 * 24)}});
  ValueId silu = b.ExpertMatMul(x, b.Param("w", test::Matrix(5 * 24, 96, DType::kQ8_0)), ids, 5, "silu");
  ValueId silu_sum = b.RouteSum(silu, weights);
  b.Output("y", silu_sum);
  ValueId biased = b.ExpertMatMul(x, b.Param("w2", test::Matrix(5 * 24, 96, DType::kQ8_0)), ids, 5, "bias", "down", {bias});
  ValueId biased_sum = b.RouteSum(biased, weights);
  b.Output("y2", biased_sum);
  const graph::Graph g = *std::move(b).Finish();
  absl::StatusOr<InMatMulRules> rules = codegen::InMatMulRulesFromTune();
  ASSERT_TRUE(rules.ok()) << rules.status();
  EXPECT_FALSE(codegen::RouteSumInExperts(g, g.node(silu_sum), 1, *rules));
  EXPECT_TRUE(codegen::RouteSumInExperts(g, g.node(biased_sum), 1, *rules));
}

// A top_k that one route_weights and ungrouped expert products read is ranked by them: the
// route_weights kernel writes the ids, the first product of the MLP (its x independent of the ids)
// reads the logits in place of the ids, and the products after it read the ids. Not where another
// node reads the ids, past one row, where no product or no route_weights reads them, where the
// route weights come after the products, or where DOPPLER_TUNE turns it off.
TEST(InMatMul, ATopKIsRankedByItsRouteWeightsAndFirstExpertProduct) {
  // The route weights before the products (as the models build them), after them, or none.
  enum class Weights { kBefore, kAfter, kNone };
  auto build = [](bool extra_reader, Weights weights) {
    graph::GraphBuilder b;
    ValueId x = b.Input("x", test::Rows(96));
    ValueId logits = b.Input("logits", test::Rows(7));
    ValueId ids = b.TopK(logits, 3);
    std::optional<ValueId> rw;
    if (weights == Weights::kBefore) rw = b.RouteWeights(logits, ids, "softmax_chosen");
    ValueId h = b.ExpertMatMul(x, b.Param("gate_up", test::Matrix(7 * 2 * 32, 96, DType::kQ8_0)), ids, 7, "silu_mul");
    ValueId down = b.ExpertMatMul(h, b.Param("down", test::Matrix(7 * 96, 32, DType::kQ8_0)), ids, 7);
    if (weights == Weights::kAfter) rw = b.RouteWeights(logits, ids, "softmax_chosen");
    b.Output("y", rw ? b.RouteSum(down, *rw) : down);
    if (extra_reader) b.Output("rw2", b.RouteWeights(logits, ids, "softmax_all"));
    return *std::move(b).Finish();
  };
  const graph::Graph g = build(false, Weights::kBefore);
  auto of = [&](graph::OpKind kind) {
    std::vector<ValueId> ids;
    for (const graph::Node& n : g.nodes()) {
      if (n.kind == kind) ids.push_back(n.id);
    }
    return ids;
  };
  const ValueId top_k = of(graph::OpKind::kTopK)[0], rw = of(graph::OpKind::kRouteWeights)[0];
  const ValueId gate = of(graph::OpKind::kExpertMatMul)[0], down = of(graph::OpKind::kExpertMatMul)[1];
  absl::StatusOr<InMatMulRules> tuned = codegen::InMatMulRulesFromTune();
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  const InMatMulRules rules = *tuned;
  InMatMulRules off = rules;
  off.top_k = false;
  EXPECT_TRUE(codegen::TopKInReaders(g, g.node(top_k), 1, rules));
  EXPECT_FALSE(codegen::TopKInReaders(g, g.node(top_k), 2, rules)) << "one row only";
  EXPECT_FALSE(codegen::TopKInReaders(g, g.node(top_k), 64, rules)) << "the products group their rows";
  EXPECT_FALSE(codegen::TopKInReaders(g, g.node(top_k), 1, off));
  EXPECT_TRUE(codegen::RanksItsExperts(g, g.node(gate), 1, rules));
  EXPECT_FALSE(codegen::RanksItsExperts(g, g.node(down), 1, rules)) << "its x depends on the ids";
  EXPECT_FALSE(codegen::RanksItsExperts(g, g.node(gate), 1, off));
  for (auto [extra, weights] : {std::pair{true, Weights::kBefore}, std::pair{false, Weights::kNone},
                                std::pair{false, Weights::kAfter}}) {
    const graph::Graph other = build(extra, weights);
    for (const graph::Node& n : other.nodes()) {
      if (n.kind == graph::OpKind::kTopK) EXPECT_FALSE(codegen::TopKInReaders(other, n, 1, rules));
      // The down product would read route weights that the plan computes after it.
      if (n.kind == graph::OpKind::kRouteSum && weights == Weights::kAfter) {
        EXPECT_FALSE(codegen::RouteSumInExperts(other, n, 1, rules));
      }
    }
  }

  // Lowering: the route_weights dispatch writes the ids and covers the top_k; the first product
  // reads the logits, the second the ids.
  absl::StatusOr<std::vector<codegen::Dispatch>> decode = codegen::Lower(g, codegen::TargetCaps{}, 1);
  ASSERT_TRUE(decode.ok()) << decode.status();
  ASSERT_EQ(decode->size(), 3u);
  const codegen::Dispatch& weights = (*decode)[0];
  EXPECT_EQ(weights.node, rw);
  EXPECT_EQ(weights.covers, (std::vector<ValueId>{rw, top_k}));
  EXPECT_EQ(weights.kernel.variant, "route_weights.softmax_chosen+top_k");
  ASSERT_EQ(weights.kernel.args.size(), 3u);
  EXPECT_EQ(weights.kernel.args[2].value, top_k);
  EXPECT_TRUE(weights.kernel.args[2].written);
  EXPECT_EQ((*decode)[1].node, gate);
  EXPECT_NE((*decode)[1].kernel.variant.find("+top_k"), std::string::npos) << (*decode)[1].kernel.variant;
  EXPECT_EQ((*decode)[1].kernel.args[3].value, g.node(top_k).inputs[0]);
  EXPECT_EQ((*decode)[2].node, down);
  EXPECT_EQ((*decode)[2].kernel.variant.find("+top_k"), std::string::npos) << (*decode)[2].kernel.variant;
  EXPECT_EQ((*decode)[2].kernel.args[3].value, top_k);

  const test::ScopedTune tune("matmul.top_k=0");
  absl::StatusOr<std::vector<codegen::Dispatch>> plain = codegen::Lower(g, codegen::TargetCaps{}, 1);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_EQ(plain->size(), 4u);
  EXPECT_EQ((*plain)[0].node, top_k);
}

// An expert product whose workgroup's reduction would not fit the device's shared memory (16
// gated columns a workgroup, 128 bytes an invocation, on an 8 KiB device) is an error naming it,
// not a kernel the device cannot run.
TEST(InMatMul, AnExpertShapeBeyondTheSharedMemoryIsAnError) {
  graph::GraphBuilder b;
  ValueId x = b.Input("x", test::Rows(4096));
  ValueId ids = b.TopK(b.Input("logits", test::Rows(5)), 2);
  b.Output("h", b.ExpertMatMul(x, b.Param("w", test::Matrix(5 * 2 * 24, 4096, DType::kQ8_0)), ids, 5, "silu_mul"));
  const graph::Graph g = *std::move(b).Finish();
  codegen::TargetCaps caps;
  caps.max_shared_memory = 8192;
  ASSERT_TRUE(codegen::Lower(g, caps, 1).ok());
  const test::ScopedTune tune("experts.cols=16");
  absl::StatusOr<std::vector<codegen::Dispatch>> lowered = codegen::Lower(g, caps, 1);
  ASSERT_FALSE(lowered.ok());
  EXPECT_NE(lowered.status().message().find("bytes of shared memory; the device has 8192"), std::string::npos)
      << lowered.status();
}

}  // namespace
}  // namespace doppler
