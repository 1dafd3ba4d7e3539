// The memory planner: one arena per plan, values whose lifetimes overlap never share bytes,
// aliases (parts, in-place updates) follow their base; and the barrier schedule on byte ranges.
#include "passes/memory_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"

#include "backend_vk/plan.h"
#include "backend_vk/schedule.h"
#include "codegen/kernel.h"
#include "codegen/known_targets.h"
#include "codegen/lowering.h"
#include "formats/hf_config.h"
#include "graph/builder.h"
#include "graph/interpreter.h"
#include "graph/layout.h"
#include "graph/verifier.h"
#include "models/architecture.h"
#include "passes/pass.h"
#include "runtime/plan_compile.h"
#include "runtime/token_choice.h"
#include "tests/support/fixtures.h"
#include "tests/support/gpu_runner.h"
#include "tests/support/graph_values.h"
#include "tests/support/scoped_tune.h"
#include "tests/support/vk_test_env.h"

namespace doppler {
namespace {

using graph::Dim;
using graph::DType;
using graph::GraphBuilder;
using graph::OpKind;
using graph::TensorType;
using graph::ValueId;

using test::Matrix;
using test::Rows;
using test::Vector;

// The llama fixture's step graph as the engine compiles it, through a pass pipeline.
absl::StatusOr<graph::Graph> LlamaStepGraph(const std::string& pipeline = "none") {
  absl::StatusOr<formats::ModelConfig> config =
      formats::ReadHfConfig(test::FixturesDir() / "hf" / "llama" / "config.json");
  if (!config.ok()) return config.status();
  models::BuildOptions options;
  options.context = 512;
  options.max_step_tokens = 32;
  absl::StatusOr<graph::Graph> g = models::BuildModelGraph(*config, options);
  if (!g.ok()) return g.status();
  g = runtime::AppendTokenChoice(*std::move(g), runtime::SamplingOptions{});
  if (!g.ok()) return g.status();
  absl::StatusOr<passes::PassManager> pm = passes::PassManager::Parse(pipeline);
  if (!pm.ok()) return pm.status();
  if (absl::Status s = pm->Run(*g); !s.ok()) return s;
  return g;
}

bool IsAlias(const graph::Node& n) { return n.kind == OpKind::kPart || graph::GetOpDef(n.kind).updates_input0; }

// The value whose bytes `id` uses, recomputed here independently of the planner.
ValueId Base(const graph::Graph& g, ValueId id) {
  while (IsAlias(g.node(id))) id = g.node(id).inputs[0];
  return id;
}

// The step's dispatches on `caps` and the arena the planner lays out from them.
absl::StatusOr<runtime::LoweredStep> Planned(const graph::Graph& g, int64_t tokens, const std::set<ValueId>& outside = {},
                                             const codegen::TargetCaps& caps = codegen::LavapipeCaps()) {
  return runtime::LowerStep(g, caps, tokens, outside);
}

// Bytes of the arena some value holds over a span of dispatch positions (inclusive).
struct Piece {
  ValueId owner;
  size_t begin, end;
  int first, last;
};

// What every value in the arena holds and when, recomputed from the dispatches independently of
// the planner: a value from the first dispatch that binds it (itself or an alias of it: an
// in-place update, a part) to the last, a graph output to the end of the step; a part binds only
// its column group, so a split value holds all its bytes while bound whole and each group until
// the last dispatch binding a part of it. A value no dispatch binds holds nothing.
std::vector<Piece> Pieces(const graph::Graph& g, int64_t tokens, const runtime::LoweredStep& step) {
  std::map<std::pair<ValueId, int64_t>, std::pair<int, int>> spans;  // (base, column group or -1) -> first, last
  auto bind = [&](ValueId id, int pos) {
    int64_t group = -1;
    while (IsAlias(g.node(id))) {
      if (g.node(id).kind == OpKind::kPart && group < 0) group = g.node(id).attrs.Int("index");
      id = g.node(id).inputs[0];
    }
    auto [it, added] = spans.try_emplace({id, group}, pos, pos);
    it->second = {std::min(it->second.first, pos), std::max(it->second.second, pos)};
  };
  for (size_t d = 0; d < step.dispatches.size(); ++d) {
    for (const codegen::KernelArg& a : step.dispatches[d].kernel.args) bind(a.value, static_cast<int>(d));
  }
  for (const auto& [name, out] : g.outputs()) bind(out, static_cast<int>(step.dispatches.size()));
  std::vector<Piece> pieces;
  for (const auto& [id, offset] : step.memory.offset) {
    const graph::Node& n = g.node(id);
    auto whole = spans.find({id, -1});
    if (IsAlias(n) || whole == spans.end()) continue;
    const auto [first, last] = whole->second;
    pieces.push_back({id, offset, offset + graph::ValueBytes(n, tokens), first, last});
    const std::vector<int64_t> widths = graph::SplitWidths(n);
    if (widths.empty()) continue;
    const std::vector<graph::PartRange> ranges = graph::SplitLayout(widths, n.type.shape[0].Resolve(tokens), n.type.dtype);
    for (size_t i = 0; i < ranges.size(); ++i) {
      auto part = spans.find({id, static_cast<int64_t>(i)});
      const int part_last = part == spans.end() ? last : std::max(last, part->second.second);
      pieces.push_back({id, offset + ranges[i].offset, offset + ranges[i].offset + ranges[i].bytes, first, part_last});
    }
  }
  return pieces;
}

// Every value in the arena is in bounds and aligned, and no two values live at once share a byte.
void ExpectNoOverlap(const graph::Graph& g, int64_t tokens, const runtime::LoweredStep& step) {
  const passes::MemoryPlan& plan = step.memory;
  for (const auto& [id, offset] : plan.offset) {
    if (IsAlias(g.node(id))) continue;
    EXPECT_EQ(offset % graph::kPartAlignment, 0u) << "%" << id;
    EXPECT_LE(offset + graph::ValueBytes(g.node(id), tokens), plan.arena_bytes) << "%" << id;
  }
  const std::vector<Piece> pieces = Pieces(g, tokens, step);
  int live_together = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    for (size_t j = i + 1; j < pieces.size(); ++j) {
      const Piece &a = pieces[i], &b = pieces[j];
      if (a.owner == b.owner || a.first > b.last || b.first > a.last) continue;
      ++live_together;
      EXPECT_TRUE(a.end <= b.begin || b.end <= a.begin)
          << "%" << a.owner << " [" << a.begin << ", " << a.end << ") live " << a.first << ".." << a.last << " and %"
          << b.owner << " [" << b.begin << ", " << b.end << ") live " << b.first << ".." << b.last;
    }
  }
  EXPECT_GT(live_together, 0);
}

class MemoryPlanModelTest : public ::testing::TestWithParam<std::tuple<int64_t, std::string>> {};

TEST_P(MemoryPlanModelTest, ArenaIsSmallerThanTheValuesAndLiveValuesNeverOverlap) {
  absl::StatusOr<graph::Graph> g = LlamaStepGraph(std::get<1>(GetParam()));
  ASSERT_TRUE(g.ok()) << g.status();
  const int64_t tokens = std::get<0>(GetParam());
  std::set<ValueId> outside = {*g->output("next_token")};
  absl::StatusOr<runtime::LoweredStep> step = Planned(*g, tokens, outside);
  ASSERT_TRUE(step.ok()) << step.status();
  const passes::MemoryPlan* plan = &step->memory;
  EXPECT_GT(plan->arena_bytes, 0u);
  EXPECT_LT(plan->arena_bytes, plan->sum_of_values);
  // Every activation has a place; sources and the values bound outside have none.
  for (const graph::Node& n : g->nodes()) {
    const bool external = passes::IsExternalKind(n.kind) || outside.count(n.id) > 0 ||
                          passes::IsExternalKind(g->node(Base(*g, n.id)).kind);
    EXPECT_EQ(plan->offset.count(n.id), external ? 0u : 1u) << "%" << n.id << " " << graph::OpName(n.kind);
  }
  ExpectNoOverlap(*g, tokens, *step);
  // A deep model reuses a lot: the arena is far below the sum.
  EXPECT_LT(plan->arena_bytes * 3, plan->sum_of_values) << plan->arena_bytes << " of " << plan->sum_of_values;
}

INSTANTIATE_TEST_SUITE_P(BucketsAndPipelines, MemoryPlanModelTest,
                         ::testing::Combine(::testing::Values(1, 32), ::testing::Values("none", "default")),
                         [](const ::testing::TestParamInfo<std::tuple<int64_t, std::string>>& i) {
                           return absl::StrCat("T", std::get<0>(i.param), "_", std::get<1>(i.param));
                         });

TEST(MemoryPlan, PartsAndInPlaceUpdatesAlias) {
  GraphBuilder b;
  const ValueId x = b.Input("x", Rows(40));
  const ValueId r = b.Input("r", Rows(40));
  const ValueId a = b.Add(x, r, "a");  // an arena value
  const ValueId norm = b.RmsNormResidual(a, b.Param("w", Vector(40)), r, 1e-5, 0.0, "norm");
  const ValueId sum = b.Part(norm, 0, "sum");
  const ValueId normed = b.Part(norm, 1, "normed");
  const ValueId y = b.Mul(normed, sum, "y");
  b.Output("y", y);
  absl::StatusOr<graph::Graph> built = std::move(b).Finish();
  ASSERT_TRUE(built.ok()) << built.status();
  graph::Graph g = *std::move(built);
  // An in-place update of an arena value (the planner does not care that it is no state).
  const ValueId upd = g.AddNode(OpKind::kCacheWrite, {a, y}, {}, g.node(a).type, "upd");
  const ValueId z = g.AddNode(OpKind::kAdd, {upd, y}, {}, g.node(a).type, "z");
  g.SetOutput("z", z);

  for (int64_t tokens : {1, 7}) {
    absl::StatusOr<runtime::LoweredStep> step = Planned(g, tokens);
    ASSERT_TRUE(step.ok()) << step.status();
    const passes::MemoryPlan* plan = &step->memory;
    const std::vector<graph::PartRange> parts = graph::SplitLayout({40, 40}, tokens, DType::kF32);
    EXPECT_EQ(plan->offset.at(sum), plan->offset.at(norm) + parts[0].offset);
    EXPECT_EQ(plan->offset.at(normed), plan->offset.at(norm) + parts[1].offset);
    EXPECT_EQ(parts[1].offset % graph::kPartAlignment, 0u);
    EXPECT_EQ(plan->offset.at(upd), plan->offset.at(a));
    EXPECT_EQ(plan->offset.count(x), 0u);
    // The split value lives until y (read through its parts), and `a` until z (through upd):
    // none of norm, a, y may share bytes, whatever their sizes.
    ExpectNoOverlap(g, tokens, *step);
  }
  // A part of a value that is not split is an error, not a bad layout.
  graph::Graph bad = g;
  bad.AddNode(OpKind::kPart, {a}, {{"index", int64_t{0}}}, g.node(a).type, "bad");
  EXPECT_FALSE(passes::PlanMemory(bad, {}, 1).ok());
}

TEST(MemoryPlan, ADeadPartFreesItsColumnGroup) {
  GraphBuilder b;
  const ValueId x = b.Input("x", Rows(64));
  const ValueId norm = b.RmsNormResidual(x, b.Param("w", Vector(64)), x, 1e-5, 0.0, "norm");  // [sum | normed]
  const ValueId sum = b.Part(norm, 0, "sum");
  const ValueId normed = b.Part(norm, 1, "normed");
  const ValueId a = b.Silu(normed, "a");  // the last use of `normed`
  const ValueId c = b.Silu(b.Silu(a, "b"), "c");
  b.Output("d", b.Add(c, sum, "d"));  // `sum` lives to the end
  absl::StatusOr<graph::Graph> g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<runtime::LoweredStep> step = Planned(*g, 4);  // every value 1024 bytes, norm 2048
  ASSERT_TRUE(step.ok()) << step.status();
  const passes::MemoryPlan* plan = &step->memory;
  ExpectNoOverlap(*g, 4, *step);
  // Without reusing the dead group: norm, and two of a..d at a time (each reads the one before).
  EXPECT_EQ(plan->arena_bytes, 3u * 1024u);
  int in_the_hole = 0;
  for (const char* label : {"b", "c", "d"}) {
    for (const graph::Node& n : g->nodes()) {
      if (n.label == label && plan->offset.at(n.id) == plan->offset.at(normed)) ++in_the_hole;
    }
  }
  EXPECT_GT(in_the_hole, 0);
}

// An argmax its matmul's kernel computes (a tail, codegen/in_matmul.h: a matmul whose x is rounded
// through q8 blocks) is bound by the matmul's dispatch, so its bytes are its own from the matmul on: not
// those of the matmul's input, which its own dispatch after the matmul may reuse otherwise.
TEST(MemoryPlan, AnArgmaxInItsProducerLivesFromTheMatmul) {
  GraphBuilder b;
  ValueId x = b.Input("x", Rows(64));
  ValueId a = b.Add(x, x);
  ValueId logits = b.MatMul(a, b.Param("w", Matrix(64, 64, DType::kQ8_0)));
  ValueId ids = b.Argmax(logits);
  b.Output("logits", logits);
  graph::Graph g = *std::move(b).Finish();
  absl::StatusOr<std::unique_ptr<passes::Pass>> q8 = passes::MakePass("q8-activations");
  ASSERT_TRUE(q8.ok()) << q8.status();
  ASSERT_TRUE((*q8)->Run(g).ok());
  auto overlap = [&](const passes::MemoryPlan& plan) {
    const size_t a0 = plan.offset.at(a), ids0 = plan.offset.at(ids);
    return ids0 < a0 + 64 * 4 && a0 < ids0 + 4;
  };
  {
    const test::ScopedTune no_tails("matmul.tail=0");
    absl::StatusOr<runtime::LoweredStep> plain = Planned(g, 1);
    ASSERT_TRUE(plain.ok()) << plain.status();
    ASSERT_EQ(plain->dispatches.back().node, ids);
    EXPECT_TRUE(overlap(plain->memory)) << "the argmax's own dispatch may reuse the matmul's input";
  }
  absl::StatusOr<runtime::LoweredStep> fused = Planned(g, 1);
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_EQ(fused->dispatches.back().node, logits) << "the matmul's kernel computes the argmax";
  EXPECT_FALSE(overlap(fused->memory));
}

TEST(MemoryPlan, ValuesBoundOutsideTakeNoArena) {
  absl::StatusOr<graph::Graph> g = LlamaStepGraph();
  ASSERT_TRUE(g.ok()) << g.status();
  std::set<ValueId> outside;
  for (const graph::Node& n : g->nodes()) {
    if (!passes::IsExternalKind(n.kind) && !IsAlias(n)) outside.insert(n.id);
  }
  absl::StatusOr<runtime::LoweredStep> step = Planned(*g, 4, outside);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->memory.arena_bytes, 0u);
  EXPECT_EQ(step->memory.sum_of_values, 0u);
}

TEST(Schedule, BarriersOnlyOnByteRangeHazards) {
  using vk::ByteRange;
  using vk::DispatchAccess;
  const ByteRange in{1, 0, 64}, a{0, 0, 256}, b{0, 256, 512}, c{0, 0, 128};
  std::vector<DispatchAccess> d = {
      {{in}, {a}},  // 0: writes a
      {{in}, {b}},  // 1: independent of 0
      {{a}, {}},    // 2: reads a (RAW)
      {{b}, {}},    // 3: reads b, written before the last barrier too: already synchronised
      {{}, {c}},    // 4: overwrites bytes 2 read (WAR)
      {{}, {b}},    // 5: overwrites bytes 3 read before the last barrier: fine
      {{}, {b}},    // 6: writes what 5 wrote (WAW)
  };
  EXPECT_EQ(vk::PlaceBarriers(d), (std::vector<bool>{false, false, true, false, true, false, true}));
}

TEST(Schedule, LocatesAliasesInTheArena) {
  GraphBuilder b;
  const ValueId x = b.Input("x", Rows(40));
  const ValueId norm = b.RmsNormResidual(x, b.Param("w", Vector(40)), x, 1e-5, 0.0, "norm");
  const ValueId p0 = b.Part(norm, 0);
  const ValueId p1 = b.Part(norm, 1);
  b.Output("y", b.Add(p1, p0));
  absl::StatusOr<graph::Graph> g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<runtime::LoweredStep> step = Planned(*g, 3);
  ASSERT_TRUE(step.ok()) << step.status();
  const passes::MemoryPlan* plan = &step->memory;
  std::map<ValueId, uint64_t> external = {{x, 7}, {*g->FindNamed(OpKind::kParam, "w"), 8}};
  auto loc = vk::LocateValues(*g, 3, vk::ArenaLayout{plan->arena_bytes, plan->offset}, external);
  ASSERT_TRUE(loc.ok()) << loc.status();
  const std::vector<graph::PartRange> parts = graph::SplitLayout({40, 40}, 3, DType::kF32);
  for (int i = 0; i < 2; ++i) {
    const vk::ValueLocation& p = (*loc)[static_cast<size_t>(i == 0 ? p0 : p1)];
    EXPECT_EQ(p.buffer, vk::kArenaBuffer);
    EXPECT_EQ(p.offset, (*loc)[static_cast<size_t>(norm)].offset + parts[static_cast<size_t>(i)].offset);
    EXPECT_EQ(p.bytes, parts[static_cast<size_t>(i)].bytes);
  }
  EXPECT_EQ((*loc)[static_cast<size_t>(x)].buffer, 7u);
  EXPECT_EQ((*loc)[static_cast<size_t>(x)].bytes, vk::kToTheEnd);
  // A source with no buffer is an error.
  EXPECT_FALSE(vk::LocateValues(*g, 3, vk::ArenaLayout{plan->arena_bytes, plan->offset}, {{x, 7}}).ok());
}

// Barriers of the llama step's schedule with `layout` (values bound outside: every source, and
// the chosen token).
int Barriers(const graph::Graph& g, int64_t tokens, const std::vector<codegen::Dispatch>& dispatches,
             const vk::ArenaLayout& layout) {
  std::map<ValueId, uint64_t> external;
  for (const graph::Node& n : g.nodes()) {
    if (passes::IsExternalKind(n.kind)) external[n.id] = 3 + static_cast<uint64_t>(n.id);
  }
  external[*g.output("next_token")] = 1;
  absl::StatusOr<std::vector<vk::ValueLocation>> loc = vk::LocateValues(g, tokens, layout, external);
  EXPECT_TRUE(loc.ok()) << loc.status();
  if (!loc.ok()) return -1;
  std::vector<vk::DispatchAccess> accesses;
  for (const codegen::Dispatch& d : dispatches) accesses.push_back(vk::AccessOf(d.kernel, *loc));
  const std::vector<bool> barriers = vk::PlaceBarriers(accesses);
  return static_cast<int>(std::count(barriers.begin(), barriers.end(), true));
}

TEST_P(MemoryPlanModelTest, ReuseCostsNoBarriers) {
  absl::StatusOr<graph::Graph> g = LlamaStepGraph(std::get<1>(GetParam()));
  ASSERT_TRUE(g.ok()) << g.status();
  const int64_t tokens = std::get<0>(GetParam());
  const std::set<ValueId> outside = {*g->output("next_token")};
  absl::StatusOr<runtime::LoweredStep> step = Planned(*g, tokens, outside);
  ASSERT_TRUE(step.ok()) << step.status();
  const passes::MemoryPlan* plan = &step->memory;
  // Every value in bytes of its own, one after another.
  vk::ArenaLayout apart;
  for (const graph::Node& n : g->nodes()) {
    if (passes::IsExternalKind(n.kind) || IsAlias(n) || outside.count(n.id) > 0) continue;
    apart.offsets[n.id] = apart.bytes;
    apart.bytes += (graph::ValueBytes(n, tokens) + graph::kPartAlignment - 1) / graph::kPartAlignment * graph::kPartAlignment;
  }
  const int reused = Barriers(*g, tokens, step->dispatches, vk::ArenaLayout{plan->arena_bytes, plan->offset});
  const int separate = Barriers(*g, tokens, step->dispatches, apart);
  EXPECT_GT(separate, 0);
  EXPECT_EQ(reused, separate);
}

// A long chain reuses a few slots of the arena over and over: the GPU result must not change
// (the synchronisation validation layer checks the write-after-read barriers that reuse needs).
class MemoryPlanGpuTest : public vk::VkTest {};

TEST_F(MemoryPlanGpuTest, ReusedBytesComputeLikeTheInterpreter) {
  GraphBuilder b;
  const ValueId x = b.Input("x", Rows(96));
  const ValueId w = b.Param("w", Matrix(96, 96));
  ValueId h = x;
  for (int i = 0; i < 6; ++i) {
    const ValueId m = b.MatMul(h, w);
    const ValueId s = b.Silu(m);
    const ValueId norm = b.RmsNormResidual(s, b.Param("n" + std::to_string(i), Vector(96)), h, 1e-5, 0.0);
    h = b.Mul(b.Part(norm, 1), b.Part(norm, 0));
  }
  b.Output("y", h);
  absl::StatusOr<graph::Graph> g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  test::RandomParams params(*g, 99);
  auto gpu = test::GpuRunner::Create(ctx(), *g, 8, params);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  absl::StatusOr<runtime::LoweredStep> step = Planned(*g, 8, {x}, vk::TargetCapsOf(ctx().info()));
  ASSERT_TRUE(step.ok()) << step.status();
  const passes::MemoryPlan* plan = &step->memory;
  EXPECT_EQ((*gpu)->plan().stats().activation_bytes, plan->arena_bytes);
  EXPECT_LT(plan->arena_bytes * 2, plan->sum_of_values);
  graph::Interpreter interp(params);
  for (int64_t t : {8, 3}) {
    std::map<std::string, graph::Tensor> in = {
        {"x", graph::Tensor::F32({t, 96}, test::RandomFloats(static_cast<size_t>(t * 96), 5, -0.5f, 0.5f))}};
    auto want = interp.Run(*g, in, 0);
    ASSERT_TRUE(want.ok()) << want.status();
    auto got = (*gpu)->Run(in, 0);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_LE(test::RelativeError(got->at("y").f, want->at("y").f), 1e-4);
  }
}

}  // namespace
}  // namespace doppler
