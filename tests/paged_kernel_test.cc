// The kernels of paged graphs (graph/paging.h) against the interpreter: rope, cache writes and
// attention (plain, with rope and head norm prologues, windowed, appending, with sinks) over a pool
// of pages that the rows' page tables name in a shuffled order, for one sequence a step (prefill chunks)
// and for a row per sequence (batched decode steps, every row at its own position). The pools start
// with random rows, which both sides see: the history before a sequence's first position, and
// what rows of pages no table names must keep.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "backend_vk/plan.h"
#include "codegen/step_rows.h"
#include "codegen/tuning/attention.h"
#include "graph/builder.h"
#include "graph/paging.h"
#include "graph/printer.h"
#include "passes/pass.h"
#include "quant/float_codec.h"
#include "runtime/plan_compile.h"
#include "runtime/resources.h"
#include "tests/support/compiled_kernel.h"
#include "tests/support/gpu_runner.h"
#include "tests/support/graph_values.h"
#include "tests/support/scoped_tune.h"
#include "tests/support/vk_test_env.h"

namespace doppler {
namespace {

using graph::Dim;
using graph::DType;
using graph::GraphBuilder;
using graph::Paging;
using graph::Tensor;
using graph::TensorType;
using graph::ValueId;
using test::RandomRows;
using test::Rows;

// One step of a paged graph: each row's position and the page tables (one, or one a row).
struct PagedStep {
  std::map<std::string, Tensor> inputs;
  std::vector<int32_t> positions, tables;
};

// A plan of a paged graph whose step block this test writes, as the host does.
class PagedRunner {
 public:
  static absl::StatusOr<std::unique_ptr<PagedRunner>> Create(vk::Context& ctx, const graph::Graph& g, int64_t bucket,
                                                             const test::RandomParams& params,
                                                             const codegen::TargetCaps& caps, int steps = 1) {
    std::unique_ptr<PagedRunner> r(new PagedRunner(ctx, g));
    r->bucket_ = bucket;
    absl::Status s = runtime::CreateResources(
        ctx, g, [&](const graph::Node& n) { return params.bytes(n.attrs.Str("name")); }, r->resources_);
    if (!s.ok()) return s;
    std::map<graph::ValueId, vk::Buffer*> external = runtime::BindResources(g, r->resources_);
    for (const graph::Node& n : g.nodes()) {
      if (n.kind != graph::OpKind::kInput) continue;
      const size_t bytes = graph::ByteSize(n.type.dtype, graph::NumElements(n.type.shape, bucket));
      absl::StatusOr<std::unique_ptr<vk::Buffer>> b = ctx.CreateBuffer(bytes, vk::BufferKind::kHostVisible, n.label);
      if (!b.ok()) return b.status();
      external[n.id] = b->get();
      r->inputs_[n.id] = *std::move(b);
    }
    std::set<graph::ValueId> outside;
    for (const auto& [id, buffer] : external) outside.insert(id);
    absl::StatusOr<runtime::LoweredStep> step = runtime::LowerStep(g, caps, bucket, outside);
    if (!step.ok()) return step.status();
    absl::StatusOr<std::unique_ptr<vk::Plan>> plan =
        vk::Plan::Build(ctx, r->pipelines_, g, bucket, std::move(step->dispatches), external,
                        vk::ArenaLayout{step->memory.arena_bytes, step->memory.offset}, "paged", steps);
    if (!plan.ok()) return plan.status();
    r->plan_ = *std::move(plan);
    return r;
  }

  vk::Buffer& state(const std::string& name) { return *resources_.at(name); }
  const uint32_t* plan_step_block(int step) { return plan_->step_block(step); }
  const vk::Plan& plan() const { return *plan_; }

  // Runs the plan's steps (one PagedStep each, of the same token count; the inputs are the first's)
  // and returns the outputs.
  absl::StatusOr<std::map<std::string, Tensor>> Run(const std::vector<PagedStep>& steps) {
    const PagedStep& step = steps.front();
    const uint32_t tokens = static_cast<uint32_t>(step.positions.size());
    for (const graph::Node& n : g_.nodes()) {
      if (n.kind != graph::OpKind::kInput) continue;
      const Tensor& t = step.inputs.at(n.attrs.Str("name"));
      const void* src = t.dtype == DType::kI32 ? static_cast<const void*>(t.i.data()) : t.f.data();
      std::memcpy(inputs_.at(n.id)->mapped(), src, static_cast<size_t>(t.numel()) * 4);
    }
    const codegen::StepBlockLayout l = codegen::StepBlockLayoutOf(g_.paging(), bucket_);
    for (size_t s = 0; s < steps.size(); ++s) {
      uint32_t* block = plan_->step_block(static_cast<int>(s));
      if (block == nullptr) return absl::InternalError(absl::StrCat("no step block ", s));
      if (steps[s].tables.size() > l.table_count * static_cast<size_t>(g_.paging().table_pages)) {
        return absl::InvalidArgumentError("more page tables than the step block holds");
      }
      std::memcpy(block + l.positions, steps[s].positions.data(), steps[s].positions.size() * 4);
      std::memcpy(block + l.tables, steps[s].tables.data(), steps[s].tables.size() * 4);
    }
    if (absl::Status s = plan_->Run(tokens, static_cast<uint32_t>(step.positions[0])); !s.ok()) return s;
    std::map<std::string, Tensor> out;
    for (const auto& [name, id] : g_.outputs()) {
      const graph::Node& n = g_.node(id);
      Tensor t;
      t.dtype = n.type.dtype;
      t.shape = graph::Resolve(n.type.shape, tokens);
      const size_t count = static_cast<size_t>(t.numel());
      void* dst;
      if (t.dtype == DType::kI32) {
        t.i.resize(count);
        dst = t.i.data();
      } else {
        t.f.resize(count);
        dst = t.f.data();
      }
      const vk::Slice& s = plan_->slice(id);
      if (absl::Status st = ctx_.Download(*s.buffer, s.offset, dst, count * 4); !st.ok()) return st;
      out[name] = std::move(t);
    }
    return out;
  }
  absl::StatusOr<std::map<std::string, Tensor>> Run(const PagedStep& step) { return Run(std::vector<PagedStep>{step}); }

 private:
  PagedRunner(vk::Context& ctx, const graph::Graph& g) : ctx_(ctx), g_(g), pipelines_(ctx) {}
  vk::Context& ctx_;
  const graph::Graph& g_;
  int64_t bucket_ = 0;
  vk::PipelineCache pipelines_;
  runtime::Resources resources_;
  std::map<graph::ValueId, std::unique_ptr<vk::Buffer>> inputs_;
  std::unique_ptr<vk::Plan> plan_;
};

// The sequences of a test: each with its pages of the pool (a shuffled share of it, a few pages
// left to no sequence) and its next position.
struct Sequences {
  std::vector<std::vector<int32_t>> pages;  // a page table's entries, -1 where none
  std::vector<int32_t> next;
  std::set<int32_t> used;  // pages some table names
};

// `starts.size()` sequences from those positions, each with pages for `span` more positions but
// none for pages wholly before `start - window + 1` (with a window: the host freed them).
Sequences AllocateSequences(const std::vector<int32_t>& starts, int64_t span, int64_t window, const Paging& paging,
                            int64_t pool_pages, uint32_t seed) {
  std::vector<int32_t> free(static_cast<size_t>(pool_pages));
  for (int32_t i = 0; i < pool_pages; ++i) free[static_cast<size_t>(i)] = i;
  std::shuffle(free.begin(), free.end(), std::mt19937(seed));
  Sequences s;
  for (int32_t start : starts) {
    std::vector<int32_t> table(static_cast<size_t>(paging.table_pages), -1);
    const int64_t last_page = (start + span - 1) / paging.page_rows;
    const int64_t oldest = window > 0 ? std::max<int64_t>(0, start - window + 1) : 0;
    for (int64_t p = oldest / paging.page_rows; p <= last_page; ++p) {
      table[static_cast<size_t>(p)] = free.back();
      s.used.insert(free.back());
      free.pop_back();
    }
    s.pages.push_back(std::move(table));
    s.next.push_back(start);
  }
  return s;
}

// Pages for `starts` and `span`, and a few more no table names.
int64_t PoolPages(const std::vector<int32_t>& starts, int64_t span, int64_t page_rows) {
  int64_t pages = 5;
  for (int32_t start : starts) pages += (start + span - 1) / page_rows + 1;
  return pages;
}

enum class Form { kPlain, kPrologues, kAppend };

struct PagedCase {
  int64_t heads, kv_heads, head_dim, window;
  DType cache;
  std::string style;  // "" for no rope
  bool head_norm;
  Form form;
  int64_t page_rows;
  bool per_row;  // a row per sequence, else one sequence a step
  std::vector<int64_t> buckets;
  bool without_subgroups = false;  // also the kernels for devices without subgroup arithmetic
  // With per_row: rows share sequences (a mixed step): each step's first half of the rows is a
  // chunk of sequence 0's consecutive positions, the rest a row each of the others.
  bool shared_rows = false;
  bool sinks = false;              // a sink logit per head (GPT-OSS)
};

void PrintTo(const PagedCase& c, std::ostream* os) {
  *os << c.heads << "/" << c.kv_heads << " heads of " << c.head_dim << ", window " << c.window << ", "
      << graph::Name(c.cache) << ", page_rows " << c.page_rows << (c.per_row ? ", a row per sequence" : ", one sequence");
}

std::string CaseName(const PagedCase& c) {
  std::string buckets;
  for (int64_t b : c.buckets) absl::StrAppend(&buckets, "_b", b);
  return absl::StrCat(c.per_row ? "rows" : "seq", "_h", c.heads, "_kv", c.kv_heads, "_d", c.head_dim, "_w", c.window,
                      "_", graph::Name(c.cache), "_", c.style.empty() ? "norope" : c.style,
                      c.head_norm ? "_head_norm" : "",
                      c.form == Form::kPlain ? "_plain" : c.form == Form::kPrologues ? "_prologues" : "_append", "_page",
                      c.page_rows, buckets, c.without_subgroups ? "_nosubgroups" : "", c.shared_rows ? "_mixed" : "",
                      c.sinks ? "_sinks" : "");
}

// The graph of the case over pools of `pool_pages` pages.
absl::StatusOr<graph::Graph> BuildPagedAttention(const PagedCase& c, const Paging& paging, int64_t pool_pages, int64_t positions) {
  const int64_t q_width = c.heads * c.head_dim, kv_width = c.kv_heads * c.head_dim;
  GraphBuilder b;
  ValueId q = b.Input("q", Rows(q_width));
  ValueId k = b.Input("k", Rows(kv_width));
  ValueId v = b.Input("v", Rows(kv_width));
  TensorType cache{c.cache, {Dim::Static(pool_pages * paging.page_rows), Dim::Static(kv_width)}};
  if (c.head_norm) {
    q = b.GroupRmsNorm(q, b.Param("q_norm", {DType::kF32, {Dim::Static(c.head_dim)}}), c.head_dim, 1e-6, 1.0);
    k = b.GroupRmsNorm(k, b.Param("k_norm", {DType::kF32, {Dim::Static(c.head_dim)}}), c.head_dim, 1e-5, 0.0);
  }
  if (!c.style.empty()) {
    auto values = std::make_shared<std::vector<float>>(test::RandomFloats(positions * c.head_dim, 11));
    ValueId table =
        b.Const("table", {DType::kF32, {Dim::Static(positions), Dim::Static(c.head_dim / 2), Dim::Static(2)}}, values);
    q = b.Rope(q, table, c.heads, c.head_dim, c.style);
    k = b.Rope(k, table, c.kv_heads, c.head_dim, c.style);
  }
  ValueId kc = b.CacheWrite(b.State("k_cache", cache), k);
  ValueId vc = b.CacheWrite(b.State("v_cache", cache), v);
  ValueId sinks = c.sinks ? b.Param("sinks", {DType::kF32, {Dim::Static(c.heads)}}) : -1;
  b.Output("o", b.Attention(q, kc, vc, c.heads, c.kv_heads, c.head_dim, 0.3, c.window, "attention", sinks));
  absl::StatusOr<graph::Graph> g = std::move(b).Finish();
  if (!g.ok()) return g.status();
  g->set_paging(paging);
  const char* pipeline = c.form == Form::kPlain       ? "dce"
                         : c.form == Form::kPrologues ? "fuse-rope,fuse-head-norm,dce"
                                                      : "fuse-rope,fuse-head-norm,fuse-kv-append,dce";
  absl::StatusOr<passes::PassManager> pm = passes::PassManager::Parse(pipeline);
  if (!pm.ok()) return pm.status();
  if (absl::Status s = pm->Run(*g); !s.ok()) return s;
  return g;
}


constexpr int64_t kSteps = 3;
const std::vector<int32_t> kRowStarts = {1, 17, 40, 113};

class PagedAttentionTest : public vk::VkTest, public ::testing::WithParamInterface<PagedCase> {
 protected:
  // Steps of the case at one bucket: with a row per sequence, `bucket` sequences (then one fewer
  // each step) one token each; with one sequence, chunks of up to `bucket` tokens.
  void RunBucket(const PagedCase& c, int64_t bucket, const codegen::TargetCaps& caps) {
    SCOPED_TRACE(absl::StrCat("bucket ", bucket));
    const int64_t q_width = c.heads * c.head_dim, kv_width = c.kv_heads * c.head_dim;
    std::vector<int32_t> starts;
    std::vector<int64_t> chunk;  // one sequence: each step's tokens
    if (c.per_row) {
      for (int64_t t = 0; t < bucket; ++t) {
        starts.push_back(kRowStarts[static_cast<size_t>(t) % kRowStarts.size()] + 3 * static_cast<int32_t>(t / 4));
      }
    } else {
      starts = {bucket > 16 ? 5 : 40};
      chunk = {std::max<int64_t>(1, bucket - 1), 1, bucket};
    }
    int64_t span = 0;  // positions each sequence advances over the steps (at most)
    for (int64_t s = 0; s < kSteps; ++s) span += c.shared_rows ? bucket : c.per_row ? 1 : chunk[static_cast<size_t>(s)];
    int64_t last = 0;
    for (int32_t p : starts) last = std::max<int64_t>(last, p + span);
    Paging paging{c.page_rows, last / c.page_rows + 2, c.per_row, c.shared_rows};
    const int64_t pool_pages = PoolPages(starts, span, c.page_rows), rows = pool_pages * c.page_rows;
    Sequences seqs = AllocateSequences(starts, span, c.window, paging, pool_pages, 77 + static_cast<uint32_t>(bucket));
    absl::StatusOr<graph::Graph> g = BuildPagedAttention(c, paging, pool_pages, last + 1);
    ASSERT_TRUE(g.ok()) << g.status();

    test::RandomParams params(*g, 1234);
    absl::StatusOr<std::unique_ptr<PagedRunner>> gpu = PagedRunner::Create(ctx(), *g, bucket, params, caps);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    ExpectVariants(c, bucket, caps, (*gpu)->plan());
    graph::Interpreter interp(params);
    // Both pools start with the same random rows (in the cache's type).
    std::map<std::string, std::vector<uint8_t>> initial;
    for (const std::string name : {"k_cache", "v_cache"}) {
      initial[name] = quant::EncodeFloats(c.cache, test::RandomFloats(static_cast<size_t>(rows * kv_width),
                                                                        name == "k_cache" ? 5 : 6, -2.0f, 2.0f));
      vk::Buffer& buffer = (*gpu)->state(name);
      ASSERT_TRUE(ctx().Upload(buffer, 0, initial[name].data(), initial[name].size()).ok());
      ASSERT_NO_FATAL_FAILURE(SetInterpreterState(interp, name, c.cache, rows, kv_width, initial[name]));
    }

    // The cooperative-matrix variant multiplies f16-rounded q (architecture.md: ~1e-3 relative).
    bool coop = false;
    for (const vk::PlannedDispatch& d : (*gpu)->plan().dispatches()) coop = coop || d.variant.rfind("coop.", 0) == 0;
    const double tolerance = coop ? 1e-3 : c.cache == DType::kF16 ? 2e-4 : 2e-5;
    for (int64_t s = 0; s < kSteps; ++s) {
      PagedStep step;
      const int64_t tokens = c.per_row ? std::max<int64_t>(1, bucket - s) : chunk[static_cast<size_t>(s)];
      const uint32_t seed = 100 + 10 * static_cast<uint32_t>(s);
      step.inputs = {{"q", RandomRows(tokens, q_width, seed)},
                     {"k", RandomRows(tokens, kv_width, seed + 1)},
                     {"v", RandomRows(tokens, kv_width, seed + 2)}};
      const int64_t chunk_rows = c.shared_rows ? (tokens + 1) / 2 : c.per_row ? 1 : tokens;  // sequence 0's
      for (int64_t t = 0; t < tokens; ++t) {
        const size_t sq = c.per_row ? static_cast<size_t>(std::max<int64_t>(0, t - chunk_rows + 1)) : 0;
        step.positions.push_back(seqs.next[sq] + static_cast<int32_t>(t < chunk_rows ? t : 0));
        if (c.per_row || t == 0) step.tables.insert(step.tables.end(), seqs.pages[sq].begin(), seqs.pages[sq].end());
      }
      for (size_t sq = 0; sq < seqs.next.size(); ++sq) {
        const int64_t rows_of_sq = sq == 0 ? chunk_rows : static_cast<int64_t>(sq) < tokens - chunk_rows + 1 ? 1 : 0;
        seqs.next[sq] += static_cast<int32_t>(rows_of_sq);
      }
      absl::StatusOr<graph::StepRows> step_rows = graph::StepRows::Paged(paging, step.positions, step.tables);
      ASSERT_TRUE(step_rows.ok()) << step_rows.status();
      absl::StatusOr<std::map<std::string, Tensor>> want = interp.Run(*g, step.inputs, *step_rows);
      ASSERT_TRUE(want.ok()) << want.status();
      absl::StatusOr<std::map<std::string, Tensor>> got = (*gpu)->Run(step);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_NO_FATAL_FAILURE(test::ExpectOutputsMatch(*got, *want, tolerance, static_cast<size_t>(s)));
    }
    // The pools: the rows written as the interpreter wrote them (a rotated key may round to the
    // neighbouring f16 value), the pages no table names as they were, to the bit.
    for (const std::string name : {"k_cache", "v_cache"}) {
      SCOPED_TRACE(name);
      std::vector<uint8_t> bytes(initial[name].size());
      ASSERT_TRUE(ctx().Download((*gpu)->state(name), 0, bytes.data(), bytes.size()).ok());
      absl::StatusOr<Tensor> want = InterpreterState(interp, name, c.cache, rows, kv_width);
      ASSERT_TRUE(want.ok()) << want.status();
      EXPECT_LE(test::RelativeError(quant::DecodeFloats(c.cache, bytes), want->f), c.cache == DType::kF16 ? 1e-3 : 2e-5);
      const size_t page_bytes = bytes.size() / static_cast<size_t>(pool_pages);
      int untouched = 0;
      for (int32_t page = 0; page < pool_pages; ++page) {
        if (seqs.used.count(page) != 0) continue;
        ++untouched;
        const size_t at = static_cast<size_t>(page) * page_bytes;
        EXPECT_EQ(std::memcmp(bytes.data() + at, initial[name].data() + at, page_bytes), 0) << "page " << page;
      }
      EXPECT_GE(untouched, 5);
    }
  }

  // The rows of state `name` the interpreter starts from: written by an unpaged graph's cache write
  // of every row (states are shared by name across graphs).
  void SetInterpreterState(graph::Interpreter& interp, const std::string& name, DType dtype, int64_t rows, int64_t width,
                           const std::vector<uint8_t>& bytes) {
    GraphBuilder b;
    b.Output(name, b.CacheWrite(b.State(name, {dtype, {Dim::Static(rows), Dim::Static(width)}}), b.Input("x", Rows(width))));
    absl::StatusOr<graph::Graph> g = std::move(b).Finish();
    ASSERT_TRUE(g.ok()) << g.status();
    absl::StatusOr<std::map<std::string, Tensor>> out =
        interp.Run(*g, {{"x", Tensor::F32({rows, width}, quant::DecodeFloats(dtype, bytes))}}, 0);
    ASSERT_TRUE(out.ok()) << out.status();
  }
  // The interpreter's rows of state `name` (the graph's input only gives its step a token count).
  absl::StatusOr<Tensor> InterpreterState(graph::Interpreter& interp, const std::string& name, DType dtype, int64_t rows,
                                          int64_t width) {
    GraphBuilder b;
    b.Input("x", Rows(1));
    b.Output(name, b.State(name, {dtype, {Dim::Static(rows), Dim::Static(width)}}));
    absl::StatusOr<graph::Graph> g = std::move(b).Finish();
    if (!g.ok()) return g.status();
    absl::StatusOr<std::map<std::string, Tensor>> out = interp.Run(*g, {{"x", RandomRows(1, 1, 1)}}, 0);
    if (!out.ok()) return out.status();
    return out->at(name);
  }

  // A row per sequence takes keys from ChooseAttentionKeysFrom's workgroups (kv heads × rows) of
  // groups of 4 heads or more (the rule, or as DOPPLER_TUNE's attention.keys says: `keys_`),
  // subgroups otherwise, online_softmax without subgroup arithmetic (and appends in the kernel where it has subgroup
  // arithmetic); one sequence the block variant from 8 tokens.
  void ExpectVariants(const PagedCase& c, int64_t bucket, const codegen::TargetCaps& caps, const vk::Plan& plan) {
    int attentions = 0;
    const bool quads = c.head_dim % (4 * std::max<int64_t>(1, caps.min_subgroup_size)) == 0;
    const int64_t keys_from = codegen::tuning::ChooseAttentionKeysFrom(caps, quads).value;
    const bool keys = keys_.value_or(c.heads >= 4 * c.kv_heads && c.kv_heads * bucket >= keys_from);
    for (const vk::PlannedDispatch& d : plan.dispatches()) {
      if (d.family != "attention") continue;
      ++attentions;
      if (c.per_row) {
        const char* want = !caps.subgroup_arithmetic ? "online_softmax." : keys ? "keys." : "subgroups.";
        EXPECT_EQ(d.variant.rfind(want, 0), 0u) << d.variant;
      } else if (bucket >= 8 && c.head_dim <= 128) {
        EXPECT_TRUE(d.variant.rfind("block.", 0) == 0 || d.variant.rfind("coop.", 0) == 0) << d.variant;
      }
      const bool appends =
          c.form == Form::kAppend && caps.subgroup_arithmetic && ((c.per_row && !c.shared_rows) || bucket == 1);
      EXPECT_EQ(d.variant.find("+append") != std::string::npos, appends) << d.variant;
    }
    EXPECT_EQ(attentions, 1);
  }

  std::optional<bool> keys_;  // whether a row per sequence takes keys, where DOPPLER_TUNE says
};

TEST_P(PagedAttentionTest, MatchesTheInterpreterOverShuffledPages) {
  const PagedCase& c = GetParam();
  for (int64_t bucket : c.buckets) {
    ASSERT_NO_FATAL_FAILURE(RunBucket(c, bucket, vk::TargetCapsOf(ctx().info())));
    if (c.without_subgroups) ASSERT_NO_FATAL_FAILURE(RunBucket(c, bucket, WithoutSubgroupArithmetic()));
  }
  if (!c.per_row) return;
  // Fewer subgroups a workgroup, each then taking more of a row's keys; the keys variant at the
  // smallest bucket and with each of its lanes a key, the subgroups variant at the largest, and
  // with each row's keys split over workgroups (both variants at the smallest, keys at the largest).
  struct Tune {
    const char* tune;
    std::optional<bool> keys;  // what attention.keys says, if anything
    bool smallest;
  };
  for (const Tune& t : {Tune{"attention.nsg=1", std::nullopt, false}, Tune{"attention.nsg=4", std::nullopt, false},
                        Tune{"attention.keys=1", true, true}, Tune{"attention.keys=1,attention.key_lanes=2", true, true},
                        Tune{"attention.keys=1,attention.key_ahead=0", true, true},
                        Tune{"attention.keys=1,attention.key_ahead=1", true, false},
                        Tune{"attention.keys=1,attention.key_lanes=16,attention.nsg=2", true, false},
                        Tune{"attention.keys=1,attention.key_lanes=8,attention.nsg=8", true, false},
                        Tune{"attention.keys=0,attention.nsg=4", false, false},
                        Tune{"attention.keys=0,attention.splits=4,attention.split_keys=3", false, true},
                        Tune{"attention.keys=1,attention.splits=4,attention.split_keys=3", true, true},
                        Tune{"attention.keys=1,attention.splits=3,attention.split_keys=10", true, false}}) {
    test::ScopedTune scoped(t.tune);
    SCOPED_TRACE(t.tune);
    keys_ = t.keys;
    ASSERT_NO_FATAL_FAILURE(RunBucket(c, t.smallest ? c.buckets.front() : c.buckets.back(), vk::TargetCapsOf(ctx().info())));
  }
  keys_.reset();
}

INSTANTIATE_TEST_SUITE_P(
    Forms, PagedAttentionTest,
    ::testing::Values(
        // A row per sequence: batched decode steps.
        PagedCase{6, 2, 64, 0, DType::kF16, "", false, Form::kPlain, 16, true, {1, 3, 8, 13}},
        PagedCase{6, 2, 80, 0, DType::kF32, "neox", true, Form::kPrologues, 7, true, {3, 13}},
        PagedCase{6, 2, 128, 0, DType::kF16, "neox", false, Form::kAppend, 16, true, {1, 8}},
        PagedCase{6, 2, 64, 20, DType::kF32, "interleaved", true, Form::kAppend, 7, true, {3, 13}},
        PagedCase{6, 2, 80, 30, DType::kF16, "neox", false, Form::kPlain, 7, true, {8}, true},
        // The keys variant's widest group (8 heads a kv head) and a group of one.
        PagedCase{8, 1, 96, 0, DType::kF16, "neox", false, Form::kAppend, 16, true, {9, 13}},
        PagedCase{3, 3, 48, 50, DType::kF16, "", false, Form::kPlain, 7, true, {8, 33}},
        // Rows sharing sequences: a prompt's chunk beside decode rows (mixed steps).
        PagedCase{6, 2, 64, 0, DType::kF16, "neox", false, Form::kAppend, 16, true, {1, 8, 13}, false, true},
        PagedCase{6, 2, 80, 20, DType::kF32, "interleaved", true, Form::kAppend, 7, true, {3, 13}, true, true},
        // One sequence a step: prefill chunks (the block variant, and coop where the device has it).
        PagedCase{6, 2, 64, 0, DType::kF16, "", false, Form::kPlain, 16, false, {9, 70}},
        PagedCase{6, 2, 128, 0, DType::kF32, "neox", true, Form::kPrologues, 7, false, {9, 70}},
        PagedCase{6, 2, 80, 20, DType::kF16, "neox", false, Form::kAppend, 16, false, {1, 9, 70}},
        PagedCase{6, 2, 64, 0, DType::kF16, "neox", true, Form::kPrologues, 7, false, {70}},
        // 80-wide heads: blocks of 25 queries of 5 invocations (a workgroup of 125).
        PagedCase{6, 2, 80, 0, DType::kF32, "", false, Form::kPlain, 16, false, {70}},
        // Sinks (GPT-OSS): batched decode steps, and prefill chunks.
        PagedCase{4, 2, 32, 8, DType::kF16, "neox", false, Form::kAppend, 7, true, {3, 13}, true, false, true},
        PagedCase{4, 2, 32, 8, DType::kF16, "neox", false, Form::kAppend, 16, false, {1, 9, 70}, false, false, true}),
    [](const ::testing::TestParamInfo<PagedCase>& i) { return CaseName(i.param); });

class PagedRopeTest : public vk::VkTest, public ::testing::WithParamInterface<bool> {};

// The rope kernel rotates each row for its own position (a row per sequence) or for pos + t.
TEST_P(PagedRopeTest, RotatesEachRowAtItsPosition) {
  const bool per_row = GetParam();
  const int64_t heads = 3, head_dim = 10, positions = 130, bucket = 9;
  GraphBuilder b;
  auto table = std::make_shared<std::vector<float>>(test::RandomFloats(positions * head_dim, 11));
  ValueId t = b.Const("table", {DType::kF32, {Dim::Static(positions), Dim::Static(head_dim / 2), Dim::Static(2)}}, table);
  b.Output("y", b.Rope(b.Input("x", Rows(heads * head_dim)), t, heads, head_dim, "neox"));
  absl::StatusOr<graph::Graph> g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  const Paging paging{16, 9, per_row};
  g->set_paging(paging);
  test::RandomParams params(*g, 1234);
  absl::StatusOr<std::unique_ptr<PagedRunner>> gpu =
      PagedRunner::Create(ctx(), *g, bucket, params, vk::TargetCapsOf(ctx().info()));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  graph::Interpreter interp(params);
  for (int64_t tokens : {bucket, int64_t{4}}) {
    PagedStep step;
    step.inputs = {{"x", RandomRows(tokens, heads * head_dim, static_cast<uint32_t>(tokens))}};
    for (int64_t r = 0; r < tokens; ++r) {
      step.positions.push_back(per_row ? kRowStarts[static_cast<size_t>(r) % 4] + static_cast<int32_t>(r)
                                       : 40 + static_cast<int32_t>(r));
    }
    step.tables.assign(static_cast<size_t>((per_row ? tokens : 1) * paging.table_pages), 0);
    absl::StatusOr<graph::StepRows> rows = graph::StepRows::Paged(paging, step.positions, step.tables);
    ASSERT_TRUE(rows.ok()) << rows.status();
    absl::StatusOr<std::map<std::string, Tensor>> want = interp.Run(*g, step.inputs, *rows);
    ASSERT_TRUE(want.ok()) << want.status();
    absl::StatusOr<std::map<std::string, Tensor>> got = (*gpu)->Run(step);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_NO_FATAL_FAILURE(test::ExpectOutputsMatch(*got, *want, 1e-6, static_cast<size_t>(tokens)));
  }
}
INSTANTIATE_TEST_SUITE_P(Rows, PagedRopeTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "row_per_sequence" : "one_sequence"; });

// The kernels only some devices run, compiled here: with one sequence a step, coop attention over
// an f16 pool at prefill buckets; with a row per sequence, the keys variant (appending) from 64
// workgroups (kv heads × rows) of groups of 4, the subgroups variant otherwise.
TEST(PagedKernelCompileTest, CoopForOneSequenceKeysOrSubgroupsForARowPerSequence) {
  struct Want {
    PagedCase c;
    int64_t bucket;
    std::string variant;
  };
  const std::vector<Want> wants = {
      {{6, 2, 128, 0, DType::kF16, "neox", true, Form::kPrologues, 16, false, {}}, 70, "coop.f16+rms_norm+rope.neox"},
      {{6, 2, 64, 30, DType::kF16, "", false, Form::kPlain, 7, false, {}}, 70, "coop.f16.window"},
      // 256 and 64 workgroups of the keys variant: each row's keys in 2 and 4 runs.
      {{32, 8, 128, 0, DType::kF16, "neox", true, Form::kAppend, 16, true, {}}, 32,
       "keys.f16.runs2+rms_norm+rope.neox+append"},
      {{32, 8, 128, 0, DType::kF16, "neox", true, Form::kAppend, 16, true, {}}, 8,
       "keys.f16.runs4+rms_norm+rope.neox+append"},
      {{32, 8, 128, 0, DType::kF16, "neox", true, Form::kAppend, 16, true, {}}, 7,
       "subgroups.f16.runs2+rms_norm+rope.neox+append"},  // 224 workgroups: each row's keys in 2 runs
      {{6, 2, 128, 0, DType::kF16, "neox", true, Form::kAppend, 16, true, {}}, 64,
       "subgroups.f16+rms_norm+rope.neox+append"},
      // 512 workgroups of the keys variant: one run.
      {{32, 8, 80, 30, DType::kF32, "", false, Form::kPrologues, 7, true, {}}, 64, "keys.f32.window"},
      {{64, 8, 256, 0, DType::kF16, "neox", false, Form::kAppend, 16, true, {}}, 32, "keys.f16.runs2+rope.neox+append"}};
  for (const Want& w : wants) {
    SCOPED_TRACE(w.variant);
    const Paging paging{w.c.page_rows, 12, w.c.per_row};
    absl::StatusOr<graph::Graph> g = BuildPagedAttention(w.c, paging, 12, 12 * w.c.page_rows);
    ASSERT_TRUE(g.ok()) << g.status();
    int attentions = 0;
    for (const graph::Node& n : g->nodes()) {
      if (n.kind != graph::OpKind::kAttention) continue;
      ++attentions;
      codegen::TargetCaps caps = test::NvidiaCoopCaps();
      caps.subgroup_shuffle = true;  // as NVIDIA's devices have
      absl::StatusOr<test::CompiledKernel> k = test::EmitAndCompile(*g, n, caps, w.bucket);
      ASSERT_TRUE(k.ok()) << k.status();
      EXPECT_EQ(k->kernel.variant, w.variant);
    }
    EXPECT_EQ(attentions, 1);
  }
}

// A plan of several steps gives each its own block: two steps of a row per sequence write their
// rows' keys where their own page tables say, and Run leaves the blocks' positions and tables as
// the host wrote them.
class PagedPlanTest : public vk::VkTest {};

TEST_F(PagedPlanTest, EachStepOfAPlanReadsItsOwnBlock) {
  const int64_t width = 24, pool_pages = 10, bucket = 3;
  const Paging paging{4, 6, true};
  GraphBuilder b;
  b.Output("k", b.CacheWrite(b.State("k_cache", {DType::kF32, {Dim::Static(pool_pages * 4), Dim::Static(width)}}),
                             b.Input("x", Rows(width))));
  absl::StatusOr<graph::Graph> g = std::move(b).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  g->set_paging(paging);
  test::RandomParams params(*g, 1234);
  absl::StatusOr<std::unique_ptr<PagedRunner>> gpu =
      PagedRunner::Create(ctx(), *g, bucket, params, vk::TargetCapsOf(ctx().info()), 2);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const std::vector<float> zeros(static_cast<size_t>(pool_pages * 4 * width), 0.0f);
  ASSERT_TRUE(ctx().Upload((*gpu)->state("k_cache"), 0, zeros.data(), zeros.size() * 4).ok());
  std::vector<PagedStep> steps(2);
  const Tensor x = RandomRows(bucket, width, 9);
  steps[0] = {{{"x", x}}, {1, 17, 5}, {}};
  steps[1] = {{{"x", x}}, {2, 18, 6}, {}};
  // Row r's table: pages 3r + 4, 3r + 3, ... (mod 10); the rows the steps write differ.
  for (PagedStep& s : steps) {
    for (int32_t r = 0; r < bucket; ++r) {
      std::vector<int32_t> table(static_cast<size_t>(paging.table_pages), -1);
      for (int32_t p = 0; p < 5; ++p) table[static_cast<size_t>(p)] = (3 * r + 4 - p) % pool_pages;
      s.tables.insert(s.tables.end(), table.begin(), table.end());
    }
  }
  ASSERT_TRUE((*gpu)->Run(steps).ok());
  graph::Interpreter interp(params);
  std::map<std::string, Tensor> want;
  for (const PagedStep& s : steps) {
    absl::StatusOr<graph::StepRows> rows = graph::StepRows::Paged(paging, s.positions, s.tables);
    ASSERT_TRUE(rows.ok()) << rows.status();
    absl::StatusOr<std::map<std::string, Tensor>> out = interp.Run(*g, s.inputs, *rows);
    ASSERT_TRUE(out.ok()) << out.status();
    want = *std::move(out);
  }
  std::vector<float> got(zeros.size());
  ASSERT_TRUE(ctx().Download((*gpu)->state("k_cache"), 0, got.data(), got.size() * 4).ok());
  EXPECT_EQ(got, want.at("k").f);
  const codegen::StepBlockLayout l = codegen::StepBlockLayoutOf(paging, bucket);
  for (int s = 0; s < 2; ++s) {
    const uint32_t* block = (*gpu)->plan_step_block(s);
    EXPECT_EQ(block[0], static_cast<uint32_t>(bucket));
    EXPECT_EQ(std::vector<int32_t>(block + l.positions, block + l.positions + bucket), steps[static_cast<size_t>(s)].positions);
    EXPECT_EQ(std::vector<int32_t>(block + l.tables, block + l.words), steps[static_cast<size_t>(s)].tables);
  }
}

// Sampling in a paged step of one sequence: the token history and the draw at the rows' positions.
TEST_F(PagedPlanTest, SamplesOneSequenceAtItsPositions) {
  const int64_t vocab = 3001, ring = 16, bucket = 4;
  for (const double temperature : {0.0, 0.9}) {
    SCOPED_TRACE(absl::StrCat("temperature ", temperature));
    GraphBuilder b;
    ValueId ids = b.Input("ids", {DType::kI32, {Dim::Tokens()}});
    ValueId x = b.LastRow(b.Input("x", Rows(vocab)));
    x = b.RepeatPenalty(x, b.RecordTokens(b.State("history", {DType::kI32, {Dim::Static(ring)}}), ids), 1.3);
    b.Output("penalized", x);
    b.Output("token", b.Sample(x, temperature, 40, 0.95, 0.0, 7));
    absl::StatusOr<graph::Graph> g = std::move(b).Finish();
    ASSERT_TRUE(g.ok()) << g.status();
    const Paging paging{16, 4, false};
    g->set_paging(paging);
    test::RandomParams params(*g, 1);
    absl::StatusOr<std::unique_ptr<PagedRunner>> gpu =
        PagedRunner::Create(ctx(), *g, bucket, params, vk::TargetCapsOf(ctx().info()));
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    graph::Interpreter interp(params);
    int32_t pos = 37;
    for (int step = 0; step < 12; ++step) {
      const int64_t tokens = 1 + step % 3;
      PagedStep s;
      std::vector<int32_t> id_values;
      for (int64_t t = 0; t < tokens; ++t) {
        id_values.push_back(static_cast<int32_t>((step * 7 + t * 13) % 40));
        s.positions.push_back(pos + static_cast<int32_t>(t));
      }
      s.inputs = {{"ids", Tensor::I32({tokens}, id_values)},
                  {"x", Tensor::F32({tokens, vocab}, test::RandomFloats(static_cast<size_t>(tokens * vocab), 100 + step, -4.0f, 4.0f))}};
      s.tables.assign(static_cast<size_t>(paging.table_pages), 0);
      pos += static_cast<int32_t>(tokens);
      absl::StatusOr<graph::StepRows> rows = graph::StepRows::Paged(paging, s.positions, s.tables);
      ASSERT_TRUE(rows.ok()) << rows.status();
      absl::StatusOr<std::map<std::string, Tensor>> want = interp.Run(*g, s.inputs, *rows);
      ASSERT_TRUE(want.ok()) << want.status();
      absl::StatusOr<std::map<std::string, Tensor>> got = (*gpu)->Run(s);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->at("penalized").f, want->at("penalized").f) << "step " << step;
      EXPECT_EQ(got->at("token").i, want->at("token").i) << "step " << step;
    }
  }
}

}  // namespace
}  // namespace doppler
