// The IR: builder typing, the verifier's checks, the text printer.
#include <gtest/gtest.h>

#include "graph/builder.h"
#include "graph/printer.h"
#include "graph/verifier.h"

namespace doppler::graph {
namespace {

TensorType Rows(int64_t cols) { return {DType::kF32, {Dim::Tokens(), Dim::Static(cols)}}; }
TensorType Mat(int64_t r, int64_t c, DType t = DType::kF16) { return {t, {Dim::Static(r), Dim::Static(c)}}; }

Graph SmallGraph() {
  GraphBuilder b;
  ValueId ids = b.Input("ids", {DType::kI32, {Dim::Tokens()}});
  b.SetScope("layers.0");
  ValueId h = b.Embedding(b.Param("embed", Mat(10, 8)), ids, "embed");
  ValueId y = b.MatMul(h, b.Param("w", Mat(6, 8)), "proj");
  b.Output("y", y);
  return *std::move(b).Finish();
}

TEST(OpDefs, TableFollowsTheEnum) {
  for (int k = 0; k <= static_cast<int>(OpKind::kRouteSum); ++k) {
    EXPECT_EQ(static_cast<int>(GetOpDef(static_cast<OpKind>(k)).kind), k);
  }
}

TEST(Builder, InfersTypesAndLabels) {
  Graph g = SmallGraph();
  ASSERT_EQ(g.size(), 5);
  EXPECT_EQ(g.node(2).type, (TensorType{DType::kF32, {Dim::Tokens(), Dim::Static(8)}}));
  EXPECT_EQ(g.node(4).type, (TensorType{DType::kF32, {Dim::Tokens(), Dim::Static(6)}}));
  EXPECT_EQ(g.node(4).label, "layers.0.proj");
  EXPECT_EQ(*g.output("y"), 4);
}

TEST(Builder, FirstErrorIsReportedWithTheNodeLabel) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(8));
  ValueId bad = b.MatMul(x, b.Param("w", Mat(6, 9)), "q_proj");
  EXPECT_EQ(bad, -1);
  b.Add(bad, bad);  // ignored: the builder already failed
  absl::StatusOr<Graph> g = std::move(b).Finish();
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("q_proj: matmul: inner dimensions differ"), std::string::npos) << g.status();
}

TEST(Builder, RejectsMismatchedOperands) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(8));
  ValueId y = b.Input("y", Rows(7));
  b.Add(x, y);
  EXPECT_FALSE(b.status().ok());
  GraphBuilder c;
  ValueId q = c.Input("q", Rows(12));
  ValueId kv = c.State("kv", Mat(16, 8, DType::kF32));
  c.Attention(q, kv, kv, 3, 2, 4, 0.5, 0);  // 3 heads are not a multiple of 2 kv heads
  EXPECT_NE(c.status().message().find("multiple of kv_heads"), std::string::npos) << c.status();
}

TEST(Verifier, CatchesUseBeforeDefinition) {
  Graph g = SmallGraph();
  g.mutable_node(2).inputs[1] = 4;
  absl::Status s = Verify(g);
  EXPECT_NE(s.message().find("input %4 is not defined before it"), std::string::npos) << s;
}

TEST(Verifier, CatchesAStaleType) {
  Graph g = SmallGraph();
  g.mutable_node(4).type.shape[1] = Dim::Static(7);
  absl::Status s = Verify(g);
  EXPECT_NE(s.message().find("differs from the inferred f32[T, 6]"), std::string::npos) << s;
}

TEST(Verifier, CatchesMissingAttributesDanglingOutputsAndDuplicateNames) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(8));
  b.Output("y", b.RmsNorm(x, b.Param("w", {DType::kF32, {Dim::Static(8)}}), 1e-5, 0.0));
  Graph g = *std::move(b).Finish();
  Graph no_attr = g;
  no_attr.mutable_node(2).attrs = Attrs{{"eps", 1e-5}};
  EXPECT_NE(Verify(no_attr).message().find("missing attribute weight_offset"), std::string::npos);
  Graph dangling = g;
  dangling.SetOutput("z", 99);
  EXPECT_NE(Verify(dangling).message().find("output z is dangling"), std::string::npos);
  Graph dup = g;
  dup.AddNode(OpKind::kParam, {}, Attrs{{"name", std::string("w")}}, {DType::kF32, {Dim::Static(8)}}, "w");
  EXPECT_NE(Verify(dup).message().find("duplicate param name 'w'"), std::string::npos);
}

TEST(Printer, OneNodePerLine) {
  const std::string text = ToText(SmallGraph());
  EXPECT_NE(text.find("%4 = matmul(%2, %3) : f32[T, 6]  # layers.0.proj\n"), std::string::npos) << text;
  EXPECT_NE(text.find("%1 = param() {name=\"embed\"} : f16[10, 8]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("output y = %4\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace doppler::graph
