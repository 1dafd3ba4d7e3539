// The fusion passes: the rewritten shape of small graphs (and the cases that must stay apart),
// the Llama decode layer after the default pipeline, and fused == unfused on every fixture model
// through the interpreter.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "checkpoints/weights.h"
#include "formats/safetensors.h"
#include "graph/attention_inputs.h"
#include "graph/builder.h"
#include "graph/cache_write_inputs.h"
#include "graph/interpreter.h"
#include "graph/matmul_inputs.h"
#include "graph/printer.h"
#include "graph/rms_norm_inputs.h"
#include "graph/verifier.h"
#include "models/architecture.h"
#include "passes/pass.h"
#include "passes/rewrite.h"
#include "runtime/token_choice.h"
#include "tests/support/fixtures.h"
#include "tests/support/gpu_runner.h"
#include "tests/support/reference.h"

namespace doppler {
namespace {

using graph::Dim;
using graph::DType;
using graph::Graph;
using graph::GraphBuilder;
using graph::OpKind;
using graph::TensorType;
using graph::ValueId;

TensorType Rows(int64_t cols) { return {DType::kF32, {Dim::Tokens(), Dim::Static(cols)}}; }
TensorType Mat(int64_t r, int64_t c, DType t = DType::kF16) { return {t, {Dim::Static(r), Dim::Static(c)}}; }
TensorType Vec(int64_t n) { return {DType::kF32, {Dim::Static(n)}}; }

Graph RunPass(Graph g, const std::string& pipeline) {
  absl::StatusOr<passes::PassManager> pm = passes::PassManager::Parse(pipeline);
  EXPECT_TRUE(pm.ok()) << pm.status();
  absl::Status s = pm->Run(g);
  EXPECT_TRUE(s.ok()) << s << "\n" << graph::ToText(g);
  return g;
}

int Count(const Graph& g, OpKind kind) {
  return static_cast<int>(std::count_if(g.nodes().begin(), g.nodes().end(), [&](const graph::Node& n) { return n.kind == kind; }));
}

std::vector<const graph::Node*> Nodes(const Graph& g, OpKind kind) {
  std::vector<const graph::Node*> out;
  for (const graph::Node& n : g.nodes()) {
    if (n.kind == kind) out.push_back(&n);
  }
  return out;
}

// Nodes that dispatch a kernel (sources, parts and load-time weights do not).
int Kernels(const Graph& g) {
  return static_cast<int>(std::count_if(g.nodes().begin(), g.nodes().end(), [](const graph::Node& n) {
    return n.kind != OpKind::kInput && n.kind != OpKind::kParam && n.kind != OpKind::kConst &&
           n.kind != OpKind::kState && n.kind != OpKind::kPart && n.kind != OpKind::kConcatRows;
  }));
}

// The interpreter gives the same outputs before and after `pipeline` on random weights.
void ExpectSameResults(const Graph& before, const Graph& after, std::map<std::string, graph::Tensor> inputs) {
  test::RandomParams params(before, 77);
  graph::Interpreter a(params), b(params);
  auto ra = a.Run(before, inputs, 0);
  auto rb = b.Run(after, inputs, 0);
  ASSERT_TRUE(ra.ok()) << ra.status();
  ASSERT_TRUE(rb.ok()) << rb.status();
  for (const auto& [name, t] : *ra) EXPECT_LE(test::RelativeError(rb->at(name).f, t.f), 1e-6) << name;
}

graph::Tensor RandomRows(int64_t t, int64_t c) {
  return graph::Tensor::F32({t, c}, test::RandomFloats(static_cast<size_t>(t * c), 5));
}

TEST(FuseGateUp, MergesGateAndUpIntoAGatedMatmul) {
  for (bool gelu : {false, true}) {
    for (bool swapped : {false, true}) {
      GraphBuilder b;
      ValueId x = b.Input("x", Rows(24));
      ValueId g = b.MatMul(x, b.Param("gate", Mat(40, 24)), "gate");
      ValueId u = b.MatMul(x, b.Param("up", Mat(40, 24)), "up");
      ValueId a = gelu ? b.GeluTanh(g) : b.Silu(g);
      b.Output("y", swapped ? b.Mul(u, a) : b.Mul(a, u));
      Graph before = *std::move(b).Finish();
      Graph after = RunPass(before, "fuse-gate-up");
      ASSERT_EQ(Count(after, OpKind::kMatMul), 1) << graph::ToText(after);
      const graph::Node& mm = *Nodes(after, OpKind::kMatMul)[0];
      EXPECT_EQ(mm.attrs.Str("epilogue"), gelu ? "gelu_tanh_mul" : "silu_mul");
      EXPECT_EQ(after.node(graph::MatMulInputsOf(mm).w).kind, OpKind::kConcatRows);
      EXPECT_EQ(Count(after, OpKind::kMul), 0);
      EXPECT_NE(mm.attrs.Str("fused").find("mul:"), std::string::npos);
      ExpectSameResults(before, after, {{"x", RandomRows(3, 24)}});
    }
  }
}

TEST(FuseGateUp, LeavesApartWhatDoesNotMatch) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(24));
  ValueId y = b.Input("y", Rows(24));
  // Different inputs.
  b.Output("a", b.Mul(b.Silu(b.MatMul(x, b.Param("g1", Mat(8, 24)))), b.MatMul(y, b.Param("u1", Mat(8, 24)))));
  // The gate's activation is read elsewhere too.
  ValueId act = b.Silu(b.MatMul(x, b.Param("g2", Mat(8, 24))));
  b.Output("b", b.Mul(act, b.MatMul(x, b.Param("u2", Mat(8, 24)))));
  b.Output("c", act);
  // Different weight types.
  b.Output("d", b.Mul(b.Silu(b.MatMul(x, b.Param("g3", Mat(8, 24, DType::kF32)))), b.MatMul(x, b.Param("u3", Mat(8, 24)))));
  Graph after = RunPass(*std::move(b).Finish(), "fuse-gate-up");
  EXPECT_EQ(Count(after, OpKind::kMul), 3);
  EXPECT_EQ(Count(after, OpKind::kConcatRows), 0);
}

// A mixture of experts' gate and up products over per-expert matrices become one gated expert
// product over [gate_e | up_e] stacked expert by expert.
TEST(FuseGateUp, MergesExpertGateAndUpExpertByExpert) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(24));
  ValueId ids = b.TopK(b.Input("logits", Rows(3)), 2);
  auto stacked = [&](const std::string& name) {
    std::vector<ValueId> w;
    for (int e = 0; e < 3; ++e) w.push_back(b.Param(name + std::to_string(e), Mat(10, 24)));
    return b.ConcatRows(w, name);
  };
  ValueId g = b.ExpertMatMul(x, stacked("gate"), ids, 3);
  ValueId u = b.ExpertMatMul(x, stacked("up"), ids, 3);
  b.Output("y", b.Mul(b.Silu(g), u));
  Graph before = *std::move(b).Finish();
  Graph after = RunPass(before, "fuse-gate-up");
  ASSERT_EQ(Count(after, OpKind::kExpertMatMul), 1) << graph::ToText(after);
  const graph::Node& mm = *Nodes(after, OpKind::kExpertMatMul)[0];
  EXPECT_EQ(mm.attrs.Str("epilogue"), "silu_mul");
  const graph::Node& w = after.node(graph::MatMulInputsOf(mm).w);
  ASSERT_EQ(w.kind, OpKind::kConcatRows);
  std::vector<std::string> order;
  for (ValueId in : w.inputs) order.push_back(after.node(in).attrs.Str("name"));
  EXPECT_EQ(order, (std::vector<std::string>{"gate0", "up0", "gate1", "up1", "gate2", "up2"}));
  EXPECT_EQ(Count(after, OpKind::kMul), 0);
  ExpectSameResults(before, after, {{"x", RandomRows(3, 24)}, {"logits", RandomRows(3, 3)}});
}

TEST(FuseQkv, MergesProjectionsOfOneInputWithTheirBiases) {
  for (bool bias : {false, true}) {
    GraphBuilder b;
    ValueId x = b.Input("x", Rows(32));
    ValueId q = b.MatMul(x, b.Param("wq", Mat(32, 32)), "q");
    ValueId k = b.MatMul(x, b.Param("wk", Mat(16, 32)), "k");
    ValueId v = b.MatMul(x, b.Param("wv", Mat(16, 32)), "v");
    if (bias) {
      q = b.Add(q, b.Param("bq", Vec(32)));
      k = b.Add(k, b.Param("bk", Vec(16)));
      v = b.Add(v, b.Param("bv", Vec(16)));
    }
    b.Output("q", q);
    b.Output("k", k);
    b.Output("v", b.Silu(v));
    Graph before = *std::move(b).Finish();
    Graph after = RunPass(before, "fuse-qkv");
    ASSERT_EQ(Count(after, OpKind::kMatMul), 1) << graph::ToText(after);
    const graph::Node& mm = *Nodes(after, OpKind::kMatMul)[0];
    EXPECT_EQ(mm.attrs.Str("split"), "32,16,16");
    EXPECT_EQ(mm.attrs.Str("epilogue"), bias ? "bias" : "");
    EXPECT_EQ(Count(after, OpKind::kPart), 3);
    EXPECT_EQ(Count(after, OpKind::kAdd), 0);
    ExpectSameResults(before, after, {{"x", RandomRows(4, 32)}});
  }
}

TEST(FuseQkv, DifferentInputsTypesOrBiasesStayApart) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(32));
  ValueId y = b.Input("y", Rows(32));
  b.Output("a", b.MatMul(x, b.Param("w1", Mat(8, 32))));
  b.Output("b", b.MatMul(y, b.Param("w2", Mat(8, 32))));                    // another input
  b.Output("c", b.MatMul(y, b.Param("w3", Mat(8, 32, DType::kF32))));       // another weight type
  b.Output("d", b.MatMul(x, b.Param("w4", Mat(8, 32, DType::kF32))));
  b.Output("e", b.Add(b.MatMul(x, b.Param("w5", Mat(8, 32, DType::kF32))), b.Param("b5", Vec(8))));  // a bias alone
  Graph after = RunPass(*std::move(b).Finish(), "fuse-qkv");
  // Only w1's group ({w1} alone: no) — nothing shares input, type and bias-ness with another.
  EXPECT_EQ(Count(after, OpKind::kMatMul), 5);
  EXPECT_EQ(Count(after, OpKind::kPart), 0);
}

TEST(FuseMatmulEpilogue, AbsorbsBiasActivationAndResidual) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(16));
  ValueId r = b.Input("r", Rows(12));
  ValueId m = b.MatMul(x, b.Param("w", Mat(12, 16)));
  b.Output("y", b.Add(r, b.Silu(b.Add(m, b.Param("b", Vec(12))))));
  Graph before = *std::move(b).Finish();
  Graph after = RunPass(before, "fuse-matmul-epilogue");
  ASSERT_EQ(after.size(), 5) << graph::ToText(after);  // x, r, w, b, the matmul
  const graph::Node& mm = *Nodes(after, OpKind::kMatMul)[0];
  EXPECT_EQ(mm.attrs.Str("epilogue"), "bias,silu,add");
  ExpectSameResults(before, after, {{"x", RandomRows(2, 16)}, {"r", RandomRows(2, 12)}});
}

TEST(FuseMatmulEpilogue, KeepsAMatmulReadTwiceOrFeedingItsOwnResidual) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(16));
  ValueId m = b.MatMul(x, b.Param("w", Mat(16, 16)));
  b.Output("a", b.Silu(m));
  b.Output("b", m);  // m is read twice
  ValueId m2 = b.MatMul(x, b.Param("w2", Mat(16, 16)));
  b.Output("c", b.Add(m2, b.Scale(m2, 2.0)));  // the "residual" depends on the matmul itself
  Graph after = RunPass(*std::move(b).Finish(), "fuse-matmul-epilogue");
  EXPECT_EQ(Count(after, OpKind::kSilu), 1);
  EXPECT_EQ(Count(after, OpKind::kAdd), 1);
}

// A mixture of experts' residual add, on either side, joins its route sum; a route sum read again,
// or added to a value made from it, stays apart.
TEST(FuseRouteSumResidual, TheResidualAddJoinsTheRouteSum) {
  for (bool sum_first : {true, false}) {
    GraphBuilder b;
    ValueId y = b.Input("y", Rows(3 * 14));
    ValueId w = b.Input("w", Rows(3));
    ValueId r = b.Input("r", Rows(14));
    ValueId s = b.RouteSum(y, w);
    b.Output("out", sum_first ? b.Add(s, r) : b.Add(r, s));
    Graph before = *std::move(b).Finish();
    Graph after = RunPass(before, "fuse-route-sum-residual");
    ASSERT_EQ(Count(after, OpKind::kAdd), 0) << graph::ToText(after);
    const graph::Node& sum = *Nodes(after, OpKind::kRouteSum)[0];
    ASSERT_EQ(sum.inputs.size(), 3u);
    EXPECT_EQ(after.node(sum.inputs[2]).attrs.Str("name"), "r");
    ExpectSameResults(before, after, {{"y", RandomRows(4, 3 * 14)}, {"w", RandomRows(4, 3)}, {"r", RandomRows(4, 14)}});
  }
  GraphBuilder b;
  ValueId y = b.Input("y", Rows(2 * 8));
  ValueId w = b.Input("w", Rows(2));
  ValueId s = b.RouteSum(y, w);
  b.Output("a", b.Add(s, b.Input("r", Rows(8))));
  b.Output("s", s);  // read again
  ValueId s2 = b.RouteSum(y, w, "s2");
  b.Output("c", b.Add(s2, b.Scale(s2, 2.0)));  // the "residual" depends on the route sum
  Graph after = RunPass(*std::move(b).Finish(), "fuse-route-sum-residual");
  EXPECT_EQ(Count(after, OpKind::kAdd), 2);
  for (const graph::Node* n : Nodes(after, OpKind::kRouteSum)) EXPECT_EQ(n->inputs.size(), 2u);
}

TEST(FuseResidualRmsNorm, WritesTheSumAndTheNormKeepingTheSumForOthers) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(20));
  ValueId r = b.Input("r", Rows(20));
  ValueId s = b.Add(x, r, "residual");
  ValueId n = b.RmsNorm(s, b.Param("w", Vec(20)), 1e-5, 0.0, "norm");
  b.Output("n", n);
  b.Output("s", b.Scale(s, 3.0));  // the residual is read again later
  Graph before = *std::move(b).Finish();
  Graph after = RunPass(before, "fuse-residual-rmsnorm");
  ASSERT_EQ(Count(after, OpKind::kAdd), 0) << graph::ToText(after);
  const graph::Node& norm = *Nodes(after, OpKind::kRmsNorm)[0];
  EXPECT_EQ(norm.attrs.Int("residual"), 1);
  EXPECT_EQ(norm.attrs.Str("split"), "20,20");
  EXPECT_EQ(Count(after, OpKind::kPart), 2);
  ExpectSameResults(before, after, {{"x", RandomRows(3, 20)}, {"r", RandomRows(3, 20)}});
}

// Gemma 3's post-norm: a norm read only by the residual add becomes the fused op's prologue, on
// either side of the add; a norm with another reader stays.
TEST(FuseResidualRmsNorm, APostNormBecomesThePrologue) {
  for (bool norm_first : {true, false}) {
    GraphBuilder b;
    ValueId x = b.Input("x", Rows(24));
    ValueId r = b.Input("r", Rows(24));
    ValueId post = b.RmsNorm(x, b.Param("wp", Vec(24)), 1e-6, 1.0, "post_norm");
    ValueId s = norm_first ? b.Add(post, r, "residual") : b.Add(r, post, "residual");
    b.Output("n", b.RmsNorm(s, b.Param("w", Vec(24)), 1e-5, 1.0, "next_norm"));
    b.Output("s", s);
    Graph before = *std::move(b).Finish();
    Graph after = RunPass(before, "fuse-residual-rmsnorm");
    ASSERT_EQ(Count(after, OpKind::kRmsNorm), 1) << graph::ToText(after);
    const graph::Node& norm = *Nodes(after, OpKind::kRmsNorm)[0];
    EXPECT_EQ(norm.attrs.Float("norm_eps"), 1e-6);
    EXPECT_EQ(norm.attrs.Float("norm_offset"), 1.0);
    const graph::RmsNormInputs in = graph::RmsNormInputsOf(norm);
    ASSERT_TRUE(in.x_norm) << graph::ToText(after);
    EXPECT_EQ(after.node(*in.x_norm).label, "wp");
    ExpectSameResults(before, after, {{"x", RandomRows(3, 24)}, {"r", RandomRows(3, 24)}});
  }
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(24));
  ValueId post = b.RmsNorm(x, b.Param("wp", Vec(24)), 1e-6, 1.0, "post_norm");
  b.Output("n", b.RmsNorm(b.Add(post, b.Input("r", Rows(24))), b.Param("w", Vec(24)), 1e-5, 0.0));
  b.Output("post", post);  // read again: the norm stays
  Graph after = RunPass(*std::move(b).Finish(), "fuse-residual-rmsnorm");
  EXPECT_EQ(Count(after, OpKind::kRmsNorm), 2);
  for (const graph::Node* n : Nodes(after, OpKind::kRmsNorm)) EXPECT_FALSE(n->attrs.Has("norm_eps"));
}

TEST(FuseResidualRmsNorm, BroadcastAddsAndGroupNormsStay) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(20));
  b.Output("a", b.RmsNorm(b.Add(x, b.Param("bias", Vec(20))), b.Param("w", Vec(20)), 1e-5, 0.0));
  Graph after = RunPass(*std::move(b).Finish(), "fuse-residual-rmsnorm");
  EXPECT_EQ(Count(after, OpKind::kAdd), 1);
}

// Per-head norms before rope (Qwen 3, Gemma 3) become prologues of the ops that already rotate;
// a norm over other groups, or one also read elsewhere, stays.
TEST(FuseHeadNorm, QAndKNormsJoinTheirRopePrologues) {
  const int64_t heads = 4, kv_heads = 2, hd = 8;
  for (bool fusable : {true, false}) {
    GraphBuilder b;
    ValueId q = b.Input("q", Rows(heads * hd));
    ValueId k = b.Input("k", Rows(kv_heads * hd));
    ValueId v = b.Input("v", Rows(kv_heads * hd));
    auto values = std::make_shared<std::vector<float>>(test::RandomFloats(32 * hd / 2 * 2, 5));
    ValueId table = b.Const("table", {DType::kF32, {graph::Dim::Static(32), graph::Dim::Static(hd / 2), graph::Dim::Static(2)}}, values);
    const int64_t group = fusable ? hd : hd / 2;
    ValueId qn = b.GroupRmsNorm(q, b.Param("qw", Vec(group)), group, 1e-6, 1.0, "q_norm");
    ValueId kn = b.GroupRmsNorm(k, b.Param("kw", Vec(group)), group, 1e-6, 1.0, "k_norm");
    graph::TensorType cache{DType::kF32, {graph::Dim::Static(32), graph::Dim::Static(kv_heads * hd)}};
    ValueId kc = b.CacheWrite(b.State("k_cache", cache), b.Rope(kn, table, kv_heads, hd, "neox"));
    ValueId vc = b.CacheWrite(b.State("v_cache", cache), v);
    b.Output("o", b.Attention(b.Rope(qn, table, heads, hd, "neox"), kc, vc, heads, kv_heads, hd, 0.5, 0));
    Graph before = *std::move(b).Finish();
    Graph after = RunPass(before, "fuse-rope,fuse-head-norm,dce");
    EXPECT_EQ(Count(after, OpKind::kRmsNorm), fusable ? 0 : 2) << graph::ToText(after);
    if (fusable) {
      EXPECT_EQ(Nodes(after, OpKind::kAttention)[0]->attrs.Float("norm_offset"), 1.0);
      const graph::AttentionInputs a = graph::AttentionInputsOf(*Nodes(after, OpKind::kAttention)[0]);
      ASSERT_TRUE(a.q_norm) << graph::ToText(after);
      EXPECT_EQ(after.node(*a.q_norm).label, "qw");
    }
    ExpectSameResults(before, after,
                      {{"q", RandomRows(3, heads * hd)}, {"k", RandomRows(3, kv_heads * hd)}, {"v", RandomRows(3, kv_heads * hd)}});
  }
}

TEST(FuseEmbeddingScale, AScaledGatherTakesTheFactor) {
  // Fused where the scale alone reads the gather; not where the gather is also an output.
  for (bool fusable : {true, false}) {
    GraphBuilder b;
    ValueId e = b.Embedding(b.Param("table", {DType::kF32, {graph::Dim::Static(11), graph::Dim::Static(6)}}),
                            b.Input("ids", {DType::kI32, {graph::Dim::Tokens()}}), "embed");
    b.Output("y", b.Scale(e, 2.5f, "embed_scale"));
    if (!fusable) b.Output("e", e);
    Graph before = *std::move(b).Finish();
    Graph after = RunPass(before, "fuse-embedding-scale,dce");
    EXPECT_EQ(Count(after, OpKind::kScale), fusable ? 0 : 1) << graph::ToText(after);
    if (fusable) EXPECT_FLOAT_EQ(Nodes(after, OpKind::kEmbedding)[0]->attrs.Float("scale"), 2.5f);
    ExpectSameResults(before, after, {{"ids", graph::Tensor::I32({4}, {3, 0, 10, 3})}});
  }
}

TEST(FuseNormMatmul, EveryMatmulReaderTakesTheNormAsItsPrologue) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(32));
  ValueId r = b.Input("r", Rows(24));
  ValueId n = b.RmsNorm(x, b.Param("g", Vec(32)), 1e-5, 1.0, "norm");  // Gemma-style (1 + g)
  b.Output("a", b.MatMulFused(n, b.Param("wa", Mat(24, 32)), {r}, "add"));
  b.Output("b", b.MatMul(n, b.Param("wb", Mat(8, 32))));
  Graph before = *std::move(b).Finish();
  Graph after = RunPass(before, "fuse-norm-matmul");
  ASSERT_EQ(Count(after, OpKind::kRmsNorm), 0) << graph::ToText(after);
  for (const graph::Node* m : Nodes(after, OpKind::kMatMul)) {
    EXPECT_EQ(m->attrs.Float("norm_eps"), 1e-5);
    EXPECT_EQ(m->attrs.Float("norm_offset"), 1.0);
    const graph::MatMulInputs in = graph::MatMulInputsOf(*m);
    ASSERT_TRUE(in.x_norm) << graph::ToText(after);
    EXPECT_EQ(after.node(*in.x_norm).label, "g");
  }
  ExpectSameResults(before, after, {{"x", RandomRows(3, 32)}, {"r", RandomRows(3, 24)}});
}

TEST(FuseNormMatmul, NormsReadByOtherOpsOrAsWeightsStay) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(16));
  ValueId n = b.RmsNorm(x, b.Param("g", Vec(16)), 1e-5, 0.0, "norm");
  b.Output("a", b.MatMul(n, b.Param("w", Mat(4, 16))));
  b.Output("b", b.Scale(n, 2.0));  // a reader that is not a matmul
  ValueId n2 = b.RmsNorm(x, b.Param("g2", Vec(16)), 1e-5, 0.0, "norm2");
  b.Output("c", n2);  // a graph output
  Graph after = RunPass(*std::move(b).Finish(), "fuse-norm-matmul");
  EXPECT_EQ(Count(after, OpKind::kRmsNorm), 2);
}

// After appending, redirecting and rewriting in place, the kept lists equal a fresh scan's:
// each reader once, in increasing id, the replacement keeping its read of what it replaces.
TEST(UseLists, StayEqualToAFreshScanThroughRewrites) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(8));
  ValueId a = b.Silu(x);
  ValueId twice = b.Mul(a, a);
  ValueId sum = b.Add(twice, a);
  b.Output("y", sum);
  b.Output("a", a);
  Graph g = *std::move(b).Finish();
  passes::UseLists uses(g);
  EXPECT_EQ(uses.users(a), (std::vector<ValueId>{twice, sum}));
  EXPECT_EQ(uses.SoleUser(g, twice), sum);
  EXPECT_EQ(uses.SoleUser(g, a), -1);
  absl::StatusOr<ValueId> scaled = uses.AddNode(g, OpKind::kScale, {a}, graph::Attrs{{"factor", 2.0}}, "s");
  ASSERT_TRUE(scaled.ok()) << scaled.status();
  uses.ReplaceAllUses(g, a, *scaled);
  EXPECT_EQ(uses.users(a), std::vector<ValueId>{*scaled});
  EXPECT_EQ(uses.users(*scaled), (std::vector<ValueId>{twice, sum}));
  EXPECT_EQ(g.node(twice).inputs, (std::vector<ValueId>{*scaled, *scaled}));
  EXPECT_EQ(*g.output("a"), *scaled);
  uses.SetInputs(g, twice, {x, *scaled});
  const passes::UseLists fresh(g);
  for (ValueId id = 0; id < g.size(); ++id) EXPECT_EQ(uses.users(id), fresh.users(id)) << "value " << id;
  EXPECT_EQ(uses.users(x), (std::vector<ValueId>{a, twice}));
}

TEST(Dce, RemovesWhatNoOutputReads) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(4));
  b.Silu(x);  // unused
  b.Output("y", b.Scale(x, 2.0));
  Graph after = RunPass(*std::move(b).Finish(), "dce");
  EXPECT_EQ(after.size(), 2);
}

TEST(PassManager, UnknownPassIsAnError) {
  absl::StatusOr<passes::PassManager> pm = passes::PassManager::Parse("fuse-qkv,frobnicate");
  ASSERT_FALSE(pm.ok());
  EXPECT_NE(pm.status().message().find("unknown pass 'frobnicate'; passes: fuse-gate-up"), std::string::npos);
}

absl::StatusOr<Graph> FixtureGraph(const std::string& name, int64_t step_tokens) {
  absl::StatusOr<formats::ModelConfig> config = formats::ReadHfConfig(test::FixturesDir() / "hf" / name / "config.json");
  if (!config.ok()) return config.status();
  models::BuildOptions o;
  o.context = 64;
  o.weight_dtype = DType::kF32;
  o.kv_dtype = DType::kF32;
  o.logits_all_tokens = true;
  o.max_step_tokens = step_tokens;
  absl::StatusOr<Graph> g = models::BuildModelGraph(*config, o);
  if (!g.ok()) return g.status();
  return runtime::AppendTokenChoice(*std::move(g), runtime::SamplingOptions{});
}

// One Llama layer's decode step after the default pipeline: norm, one QKV matmul (three parts),
// rope on q and k, the two cache writes, attention, the output projection with the residual in
// its epilogue, norm, the gate-up matmul with SiLU·mul, the down projection with the residual.
TEST(DefaultPipeline, LlamaDecodeLayerShape) {
  absl::StatusOr<Graph> g = FixtureGraph("llama", 1);
  ASSERT_TRUE(g.ok()) << g.status();
  Graph fused = RunPass(*g, "default");
  std::vector<std::string> layer0;
  for (const graph::Node& n : fused.nodes()) {
    if (n.label.rfind("layers.0.", 0) != 0 || n.kind == OpKind::kParam || n.kind == OpKind::kState ||
        n.kind == OpKind::kConcatRows) {
      continue;
    }
    std::string d = graph::OpName(n.kind);
    if (n.attrs.Has("epilogue")) d += "{" + n.attrs.Str("epilogue") + "}";
    if (n.attrs.Has("split")) d += "{split " + n.attrs.Str("split") + "}";
    if (n.attrs.Has("norm_eps")) d += "{norm}";
    if (n.kind != OpKind::kRope && n.attrs.Has("style")) d += "{rope}";
    if (n.attrs.Int("append") == 1) d += "{append}";
    layer0.push_back(d);
  }
  // Both norms become prologues of the matmuls that read them, the ropes prologues of the k cache
  // write and of attention, and the cache writes part of attention.
  const std::vector<std::string> want = {"matmul{split 128,64,64}{norm}", "part", "part", "part",
                                         "attention{rope}{append}", "matmul{add}", "matmul{silu_mul}{norm}",
                                         "matmul{add}"};
  std::vector<std::string> sorted_got = layer0, sorted_want = want;
  std::sort(sorted_got.begin(), sorted_got.end());
  std::sort(sorted_want.begin(), sorted_want.end());
  EXPECT_EQ(sorted_got, sorted_want) << graph::ToText(fused);
  std::printf("layer 0 after the default pipeline: %zu nodes (%d before)\n", layer0.size(),
              static_cast<int>(std::count_if(g->nodes().begin(), g->nodes().end(), [](const graph::Node& n) {
                return n.label.rfind("layers.0.", 0) == 0 && n.kind != OpKind::kParam && n.kind != OpKind::kState;
              })));
}

// Gemma 3's layer after the default pipeline: its q and k norms are prologues of attention and
// the k cache write, each post-norm a prologue of the residual norm after it, so the only norms
// left are those residual ones: two a layer, the last layer's second being the final norm (with
// logits for every token, no last_row stands between the last residual add and it).
TEST(DefaultPipeline, Gemma3NormsBecomePrologues) {
  absl::StatusOr<Graph> g = FixtureGraph("gemma3", 1);
  ASSERT_TRUE(g.ok()) << g.status();
  Graph fused = RunPass(*g, "default");
  int layers = 0;
  for (const graph::Node& n : g->nodes()) layers += n.kind == OpKind::kAttention ? 1 : 0;
  int residual_norms = 0, other_norms = 0, normed_attention = 0, normed_key_appends = 0, cache_writes = 0;
  for (const graph::Node& n : fused.nodes()) {
    if (n.kind == OpKind::kRmsNorm) {
      (n.attrs.Int("residual") == 1 && n.attrs.Has("norm_eps") ? residual_norms : other_norms) += 1;
    }
    normed_attention += n.kind == OpKind::kAttention && n.attrs.Has("norm_eps") ? 1 : 0;
    normed_key_appends += n.kind == OpKind::kAttention && n.attrs.Has("k_norm_eps") ? 1 : 0;
    cache_writes += n.kind == OpKind::kCacheWrite ? 1 : 0;
  }
  EXPECT_GT(layers, 0);
  EXPECT_EQ(other_norms, 0) << graph::ToText(fused);
  EXPECT_EQ(residual_norms, 2 * layers) << graph::ToText(fused);
  EXPECT_EQ(normed_attention, layers);
  EXPECT_EQ(normed_key_appends, layers);  // the k norm, through the k cache write, into attention
  EXPECT_EQ(cache_writes, 0);
}

// fuse-kv-append: the k write (with its rope and head norm prologues) and the v write go into
// attention, as trailing inputs in that order; a k write that rotates with another table, or that
// something else also reads, stays.
TEST(FuseKvAppend, CacheWritesBecomeAttentionInputs) {
  absl::StatusOr<Graph> g = FixtureGraph("qwen3", 1);
  ASSERT_TRUE(g.ok()) << g.status();
  Graph before = RunPass(*g, "fuse-rope,fuse-head-norm,dce");
  Graph fused = RunPass(before, "fuse-kv-append");
  int writes_before = 0;
  std::map<std::string, const graph::Node*> k_writes;  // by label prefix (the layer)
  for (const graph::Node& n : before.nodes()) {
    if (n.kind != OpKind::kCacheWrite) continue;
    ++writes_before;
    if (graph::CacheWriteInputsOf(n).x_norm) k_writes[n.label.substr(0, n.label.find(".attn"))] = &n;
  }
  ASSERT_GT(writes_before, 0);
  int appending = 0;
  for (const graph::Node& n : fused.nodes()) {
    ASSERT_NE(n.kind, OpKind::kCacheWrite) << graph::ToText(fused);
    if (n.kind != OpKind::kAttention) continue;
    ++appending;
    const graph::AttentionInputs a = graph::AttentionInputsOf(n);
    ASSERT_TRUE(a.rope && a.q_norm && a.k_new && a.v_new && a.k_norm) << graph::ToText(fused);
    EXPECT_EQ(fused.node(a.k_cache).kind, OpKind::kState);
    EXPECT_EQ(fused.node(a.v_cache).kind, OpKind::kState);
    const graph::Node* kw = k_writes[n.label.substr(0, n.label.find(".attn"))];
    ASSERT_NE(kw, nullptr);
    EXPECT_EQ(n.attrs.Float("k_norm_eps"), kw->attrs.Float("norm_eps"));
    EXPECT_EQ(n.attrs.Float("k_norm_offset"), kw->attrs.Float("norm_offset"));
    const std::array<graph::Node, 2> writes = graph::AppendedCacheWrites(fused, n);
    EXPECT_EQ(writes[0].attrs.Int("heads"), n.attrs.Int("kv_heads"));
    const graph::CacheWriteInputs k = graph::CacheWriteInputsOf(writes[0]), v = graph::CacheWriteInputsOf(writes[1]);
    EXPECT_EQ(k.cache, a.k_cache);
    EXPECT_EQ(k.x, *a.k_new);
    EXPECT_EQ(k.rope, a.rope);
    EXPECT_EQ(k.x_norm, a.k_norm);
    EXPECT_EQ(v.cache, a.v_cache);
    EXPECT_EQ(v.x, *a.v_new);
    EXPECT_FALSE(v.rope || v.x_norm);
  }
  EXPECT_EQ(2 * appending, writes_before);
  // Without fuse-rope, the k write does not rotate but attention's q is rotated by a rope op: the
  // writes still go in (attention rotates nothing it appends).
  Graph plain = RunPass(*g, "fuse-kv-append");
  for (const graph::Node& n : plain.nodes()) EXPECT_NE(n.kind, OpKind::kCacheWrite);
  // After fuse-rope alone, the k write rotates (a third input) and attention's q does too.
  Graph roped = RunPass(RunPass(*g, "fuse-rope,dce"), "fuse-kv-append");
  for (const graph::Node& n : roped.nodes()) EXPECT_NE(n.kind, OpKind::kCacheWrite);
}

class FusedEqualsUnfused : public ::testing::TestWithParam<std::string> {};

// The whole model, fused and unfused, through the interpreter: the same logits (1e-5 relative)
// and tokens over a prefill and decode steps.
TEST_P(FusedEqualsUnfused, OnTheInterpreter) {
  absl::StatusOr<test::HfReference> ref = test::LoadHfReference(GetParam());
  ASSERT_TRUE(ref.ok()) << ref.status();
  absl::StatusOr<Graph> g = FixtureGraph(GetParam(), 24);
  ASSERT_TRUE(g.ok()) << g.status();
  Graph fused = RunPass(*g, "default");
  EXPECT_LT(Kernels(fused), Kernels(*g));
  absl::StatusOr<std::unique_ptr<formats::WeightStore>> store = formats::OpenSafetensors(ref->dir);
  ASSERT_TRUE(store.ok()) << store.status();
  checkpoints::StoreParamSource params(**store);
  graph::Interpreter a(params), b(params);
  const int64_t n = static_cast<int64_t>(ref->input_ids.size());
  auto step = [&](const std::vector<int32_t>& ids, int64_t pos) {
    std::map<std::string, graph::Tensor> in = {{"ids", graph::Tensor::I32({static_cast<int64_t>(ids.size())}, ids)}};
    auto ra = a.Run(*g, in, pos);
    auto rb = b.Run(fused, in, pos);
    ASSERT_TRUE(ra.ok()) << ra.status();
    ASSERT_TRUE(rb.ok()) << rb.status();
    EXPECT_LE(test::RelativeError(rb->at("logits").f, ra->at("logits").f), 1e-5) << "position " << pos;
    EXPECT_EQ(rb->at("next_token").i, ra->at("next_token").i) << "position " << pos;
  };
  step(ref->input_ids, 0);
  for (size_t i = 0; i < 4; ++i) step({ref->greedy_tokens[i]}, n + static_cast<int64_t>(i));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FusedEqualsUnfused,
                         ::testing::Values("llama", "llama_tied", "llama_q", "qwen2", "qwen3", "gemma3", "mistral", "phi3",
                                           "qwen3_moe", "mixtral", "gpt_oss"));

}  // namespace
}  // namespace doppler
