// The typed views of ops' inputs (graph/matmul_inputs.h, rms_norm_inputs.h, cache_write_inputs.h):
// on nodes as the builder and the fusion passes make them, each role is the value put there, and
// the list rebuilt from a view is the node's inputs.
#include <gtest/gtest.h>

#include <memory>

#include "graph/builder.h"
#include "graph/cache_write_inputs.h"
#include "graph/matmul_inputs.h"
#include "graph/printer.h"
#include "graph/rms_norm_inputs.h"
#include "passes/pass.h"

namespace doppler::graph {
namespace {

TensorType Rows(int64_t cols, DType t = DType::kF32) { return {t, {Dim::Tokens(), Dim::Static(cols)}}; }
TensorType Mat(int64_t r, int64_t c) { return {DType::kF16, {Dim::Static(r), Dim::Static(c)}}; }
TensorType Vec(int64_t n) { return {DType::kF32, {Dim::Static(n)}}; }

Graph Finished(GraphBuilder& b) {
  absl::StatusOr<Graph> g = std::move(b).Finish();
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *std::move(g) : Graph();
}

Graph RunPass(Graph g, const std::string& pipeline) {
  absl::StatusOr<passes::PassManager> pm = passes::PassManager::Parse(pipeline);
  EXPECT_TRUE(pm.ok()) << pm.status();
  absl::Status s = pm->Run(g);
  EXPECT_TRUE(s.ok()) << s << "\n" << ToText(g);
  return g;
}

// The only node of `kind`.
const Node& Only(const Graph& g, OpKind kind) {
  const Node* found = nullptr;
  for (const Node& n : g.nodes()) {
    if (n.kind != kind) continue;
    EXPECT_EQ(found, nullptr) << "more than one " << OpName(kind) << "\n" << ToText(g);
    found = &n;
  }
  EXPECT_NE(found, nullptr) << "no " << OpName(kind) << "\n" << ToText(g);
  return *found;
}

TEST(MatMulInputs, PlainProduct) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(8));
  ValueId w = b.Param("w", Mat(6, 8));
  ValueId y = b.MatMul(x, w);
  b.Output("y", y);
  Graph g = Finished(b);
  const MatMulInputs m = MatMulInputsOf(g.node(y));
  EXPECT_EQ(m.x, x);
  EXPECT_EQ(m.w, w);
  EXPECT_FALSE(m.x_norm || m.ids);
  EXPECT_TRUE(m.extras.empty() && m.epilogue.empty() && !m.split);
  EXPECT_TRUE(IsPlainProduct(m));
  EXPECT_EQ(MatMulInputList(m), g.node(y).inputs);
}

TEST(MatMulInputs, EpilogueExtrasInChainOrderAndSplit) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(8));
  ValueId w = b.Param("w", Mat(12, 8));
  ValueId bias = b.Param("b", Vec(12));
  ValueId r = b.Input("r", Rows(6));
  ValueId y = b.MatMulFused(x, w, {bias, r}, "bias,silu_mul,add", "2,4");
  b.Output("y0", b.Part(y, 0));
  b.Output("y1", b.Part(y, 1));
  Graph g = Finished(b);
  const MatMulInputs m = MatMulInputsOf(g.node(y));
  EXPECT_EQ(m.x, x);
  EXPECT_EQ(m.w, w);
  EXPECT_FALSE(m.x_norm);
  EXPECT_EQ(m.extras, (std::vector<ValueId>{bias, r}));
  EXPECT_EQ(m.epilogue, (std::vector<EpilogueStep>{EpilogueStep::kBias, EpilogueStep::kSiluMul, EpilogueStep::kAdd}));
  EXPECT_EQ(EpilogueText(m.epilogue), "bias,silu_mul,add");
  EXPECT_TRUE(m.split);
  EXPECT_FALSE(IsPlainProduct(m));
  EXPECT_EQ(MatMulInputList(m), g.node(y).inputs);
}

TEST(MatMulInputs, NormPrologueWeightBeforeTheExtras) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(8));
  ValueId gamma = b.Param("gamma", Vec(8));
  ValueId w = b.Param("w", Mat(6, 8));
  ValueId bias = b.Param("b", Vec(6));
  ValueId y = b.MatMulWithNorm(x, gamma, 1e-5, 0.0, w, {bias}, "bias");
  b.Output("y", y);
  Graph g = Finished(b);
  const MatMulInputs m = MatMulInputsOf(g.node(y));
  EXPECT_EQ(m.x, x);
  EXPECT_EQ(m.w, w);
  EXPECT_EQ(m.x_norm, gamma);
  EXPECT_EQ(m.extras, std::vector<ValueId>{bias});
  EXPECT_FALSE(IsPlainProduct(m));
  EXPECT_EQ(MatMulInputList(m), g.node(y).inputs);
}

TEST(MatMulInputs, ExpertProduct) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(8));
  ValueId ids = b.Input("ids", Rows(2, DType::kI32));
  ValueId w = b.Param("w", Mat(3 * 4, 8));
  ValueId bias = b.Param("b", Vec(3 * 4));
  ValueId plain = b.ExpertMatMul(x, w, ids, 3);
  ValueId biased = b.ExpertMatMul(x, w, ids, 3, "bias", "down", {bias});
  b.Output("plain", plain);
  b.Output("biased", biased);
  Graph g = Finished(b);
  const MatMulInputs p = MatMulInputsOf(g.node(plain));
  EXPECT_EQ(p.x, x);
  EXPECT_EQ(p.w, w);
  EXPECT_EQ(p.ids, ids);
  EXPECT_FALSE(p.x_norm);
  EXPECT_EQ(p.experts, 3);
  EXPECT_TRUE(IsPlainProduct(p));
  EXPECT_EQ(MatMulInputList(p), g.node(plain).inputs);
  const MatMulInputs s = MatMulInputsOf(g.node(biased));
  EXPECT_EQ(s.ids, ids);
  EXPECT_EQ(s.extras, std::vector<ValueId>{bias});
  EXPECT_EQ(s.epilogue, std::vector<EpilogueStep>{EpilogueStep::kBias});
  EXPECT_FALSE(IsPlainProduct(s));
  EXPECT_EQ(MatMulInputList(s), g.node(biased).inputs);
}

TEST(RmsNormInputs, WholeRowsGroupsAndResidual) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(8));
  ValueId r = b.Input("r", Rows(8));
  ValueId w = b.Param("w", Vec(8));
  ValueId wh = b.Param("wh", Vec(4));
  ValueId rows = b.RmsNorm(x, w, 1e-6, 0.0);
  ValueId heads = b.GroupRmsNorm(x, wh, 4, 1e-6, 1.0);
  ValueId residual = b.RmsNormResidual(x, w, r, 1e-6, 0.0);
  b.Output("rows", rows);
  b.Output("heads", heads);
  b.Output("residual", b.Part(residual, 1));
  Graph g = Finished(b);
  const RmsNormInputs n = RmsNormInputsOf(g.node(rows));
  EXPECT_EQ(n.x, x);
  EXPECT_EQ(n.w, w);
  EXPECT_FALSE(n.residual || n.x_norm || n.group || n.split);
  const RmsNormInputs h = RmsNormInputsOf(g.node(heads));
  EXPECT_EQ(h.w, wh);
  EXPECT_EQ(h.group, 4);
  EXPECT_FALSE(h.residual);
  const RmsNormInputs s = RmsNormInputsOf(g.node(residual));
  EXPECT_EQ(s.x, x);
  EXPECT_EQ(s.w, w);
  EXPECT_EQ(s.residual, r);
  EXPECT_FALSE(s.x_norm || s.group);
  EXPECT_TRUE(s.split);
  for (ValueId v : {rows, heads, residual}) EXPECT_EQ(RmsNormInputList(RmsNormInputsOf(g.node(v))), g.node(v).inputs);
}

// fuse-residual-rmsnorm's form with a norm prologue: the pre-norm's input and weight.
TEST(RmsNormInputs, NormPrologueAfterTheResidual) {
  GraphBuilder b;
  ValueId a = b.Input("a", Rows(8));
  ValueId r = b.Input("r", Rows(8));
  ValueId w_post = b.Param("w_post", Vec(8));
  ValueId w_next = b.Param("w_next", Vec(8));
  ValueId sum = b.Add(b.RmsNorm(a, w_post, 1e-6, 1.0), r);
  b.Output("sum", sum);
  b.Output("normed", b.RmsNorm(sum, w_next, 1e-6, 1.0));
  Graph g = RunPass(Finished(b), "fuse-residual-rmsnorm");
  const Node& fused = Only(g, OpKind::kRmsNorm);
  const RmsNormInputs n = RmsNormInputsOf(fused);
  EXPECT_EQ(g.node(n.x).label, "a");
  EXPECT_EQ(g.node(n.w).label, "w_next");
  ASSERT_TRUE(n.residual && n.x_norm) << ToText(g);
  EXPECT_EQ(g.node(*n.residual).label, "r");
  EXPECT_EQ(g.node(*n.x_norm).label, "w_post");
  EXPECT_EQ(RmsNormInputList(n), fused.inputs);
}

TEST(CacheWriteInputs, PlainRotatedAndHeadNormed) {
  const int64_t heads = 2, hd = 8;
  GraphBuilder b;
  ValueId k = b.Input("k", Rows(heads * hd));
  ValueId v = b.Input("v", Rows(heads * hd));
  auto values = std::make_shared<std::vector<float>>(16 * hd, 0.5f);
  ValueId table = b.Const("table", {DType::kF32, {Dim::Static(16), Dim::Static(hd / 2), Dim::Static(2)}}, values);
  const TensorType cache{DType::kF32, {Dim::Static(16), Dim::Static(heads * hd)}};
  ValueId v_cache = b.State("v_cache", cache);
  ValueId vc = b.CacheWrite(v_cache, v);
  ValueId kn = b.GroupRmsNorm(k, b.Param("kw", Vec(hd)), hd, 1e-6, 0.0);
  ValueId kc = b.CacheWrite(b.State("k_cache", cache), b.Rope(kn, table, heads, hd, "neox"));
  b.Output("vc", vc);
  b.Output("kc", kc);
  Graph g = Finished(b);
  const CacheWriteInputs plain = CacheWriteInputsOf(g.node(vc));
  EXPECT_EQ(plain.cache, v_cache);
  EXPECT_EQ(plain.x, v);
  EXPECT_FALSE(plain.rope || plain.x_norm);
  EXPECT_EQ(CacheWriteInputList(plain), g.node(vc).inputs);

  Graph roped = RunPass(g, "fuse-rope,dce");
  for (const Node& n : roped.nodes()) {
    if (n.kind != OpKind::kCacheWrite || !n.attrs.Has("style")) continue;
    const CacheWriteInputs c = CacheWriteInputsOf(n);
    EXPECT_EQ(roped.node(c.cache).label, "k_cache");
    EXPECT_EQ(roped.node(c.x).kind, OpKind::kRmsNorm);
    ASSERT_TRUE(c.rope);
    EXPECT_EQ(roped.node(*c.rope).label, "table");
    EXPECT_FALSE(c.x_norm);
    EXPECT_EQ(CacheWriteInputList(c), n.inputs);
  }
  Graph normed = RunPass(roped, "fuse-head-norm,dce");
  int rotated = 0;
  for (const Node& n : normed.nodes()) {
    if (n.kind != OpKind::kCacheWrite || !n.attrs.Has("style")) continue;
    ++rotated;
    const CacheWriteInputs c = CacheWriteInputsOf(n);
    EXPECT_EQ(normed.node(c.x).label, "k");
    ASSERT_TRUE(c.rope && c.x_norm) << ToText(normed);
    EXPECT_EQ(normed.node(*c.rope).label, "table");
    EXPECT_EQ(normed.node(*c.x_norm).label, "kw");
    EXPECT_EQ(CacheWriteInputList(c), n.inputs);
  }
  EXPECT_EQ(rotated, 1) << ToText(normed);
}

}  // namespace
}  // namespace doppler::graph
