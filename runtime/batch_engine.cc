#include "runtime/batch_engine.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "checkpoints/weights.h"
#include "codegen/step_rows.h"
#include "runtime/decode_activations.h"
#include "runtime/model_source.h"
#include "runtime/plan_compile.h"

namespace doppler::runtime {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The decode bucket for `rows` sequences: the next power of two, at most `max_rows`.
int Bucket(int rows, int max_rows) {
  int b = 1;
  while (b < rows) b *= 2;
  return std::min(b, max_rows);
}

// The window of every attention layer where they all have the same one (Mistral's), else 0: only
// then can a sequence's pages that fell out of the window go back to the pool (Gemma 3's global
// layers read all of its positions through the same page table).
int64_t CommonWindow(const graph::Graph& g) {
  int64_t window = -1;
  for (const graph::Node& n : g.nodes()) {
    if (n.kind != graph::OpKind::kAttention) continue;
    const int64_t w = n.attrs.Int("window");
    if (w == 0 || (window >= 0 && w != window)) return 0;
    window = w;
  }
  return std::max<int64_t>(window, 0);
}

}  // namespace

BatchEngine::~BatchEngine() = default;

absl::StatusOr<std::unique_ptr<BatchEngine>> BatchEngine::Create(EngineOptions options, const BatchOptions& batch) {
  if (batch.max_sequences < 1 || batch.max_sequences > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("-np, --parallel must be 1..1024, not ", batch.max_sequences));
  }
  if (batch.page_rows < 1 || batch.page_rows > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("the KV page size must be 1..4096 rows, not ", batch.page_rows));
  }
  if (batch.prefill_budget < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("-b, --batch-size must be at least 1 prompt token a step, not ", batch.prefill_budget));
  }
  // The pool is checked against the device's memory when it is allocated; this bounds its
  // bookkeeping before then: every sequence at the largest context.
  constexpr int64_t kMaxCtxTotal = int64_t{1024} << 20;
  if (batch.ctx_total < 0 || batch.ctx_total > kMaxCtxTotal) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ctx-total ", batch.ctx_total, " is not between 0 and ", kMaxCtxTotal, " tokens"));
  }
  std::unique_ptr<BatchEngine> e(new BatchEngine());
  e->options_ = std::move(options);
  e->batch_ = batch;
  absl::StatusOr<OpenedModel> model = OpenModel(e->options_);
  if (!model.ok()) return model.status();
  e->config_ = std::move(model->config);
  e->store_ = std::move(model->store);
  e->build_ = std::move(model->build);

  vk::ContextOptions vo;
  vo.validation = e->options_.validation;
  vo.device_index = e->options_.device_index;
  absl::StatusOr<std::unique_ptr<vk::Context>> ctx = vk::Context::Create(vo);
  if (!ctx.ok()) return ctx.status();
  e->ctx_ = *std::move(ctx);
  e->caps_ = vk::TargetCapsOf(e->ctx_->info());
  if (absl::Status s = PrintDeviceChoices(e->caps_, e->options_.verbose); !s.ok()) return s;
  absl::StatusOr<codegen::tuning::DeviceChoice> coop_rows_from = codegen::tuning::CoopRowsFrom(e->caps_);
  if (!coop_rows_from.ok()) return coop_rows_from.status();
  e->coop_rows_from_ = coop_rows_from->value;
  e->pipelines_ = std::make_unique<vk::PipelineCache>(*e->ctx_);

  // The pool: a probe graph of one page gives a page's bytes and the weights'.
  const int64_t table_pages = CeilDiv(e->options_.context, batch.page_rows);
  models::BuildOptions build = e->build_;
  build.paging = {batch.page_rows, table_pages, false};
  build.kv_pages = 1;
  absl::StatusOr<graph::Graph> probe = models::BuildModelGraph(e->config_, build);
  if (!probe.ok()) return probe.status();
  const ResourceBytes bytes = ResourceBytesOf(*probe);
  int64_t pages = CeilDiv(batch.ctx_total, batch.page_rows);
  if (batch.ctx_total == 0) {
    pages = static_cast<int64_t>(batch.max_sequences) * table_pages;
    const uint64_t device = e->ctx_->info().device_local_bytes, weights = bytes.total - bytes.cache;
    // A tenth of the memory stays free for the plans' activations and the driver.
    if (device > 0 && bytes.cache > 0 && device / 10 * 9 > weights) {
      pages = std::min<int64_t>(pages, static_cast<int64_t>((device / 10 * 9 - weights) / bytes.cache));
    }
    pages = std::max(pages, table_pages);
  }
  build.kv_pages = pages;

  absl::StatusOr<graph::Graph> prefill = StepGraph(e->config_, build, SamplingOptions{}, e->options_.passes);
  if (!prefill.ok()) return prefill.status();
  e->prefill_graph_ = *std::move(prefill);
  e->window_ = CommonWindow(e->prefill_graph_);
  build.paging.row_per_sequence = true;
  build.logits_all_tokens = true;
  absl::StatusOr<graph::Graph> decode = StepGraph(e->config_, build, SamplingOptions{}, e->options_.passes);
  if (!decode.ok()) return decode.status();
  e->decode_graph_ = *std::move(decode);
  absl::StatusOr<graph::Graph> q8 =
      WithDecodeActivations(e->decode_graph_, e->options_.decode_activations, e->caps_, e->ctx_->info().name);
  if (!q8.ok()) return q8.status();
  e->decode_q8_graph_ = *std::move(q8);
  build.paging.rows_share_sequences = true;
  absl::StatusOr<graph::Graph> mixed = StepGraph(e->config_, build, SamplingOptions{}, e->options_.passes);
  if (!mixed.ok()) return mixed.status();
  e->mixed_graph_ = *std::move(mixed);
  build.paging.rows_share_sequences = false;
  e->build_ = build;
  if (absl::Status s = e->Load(); !s.ok()) return s;  // the caches against the device's memory first
  e->pool_ = std::make_unique<PagePool>(pages);
  return e;
}

absl::Status BatchEngine::Load() {
  const formats::WeightStore& store = *store_;
  absl::Status s = CreateResources(
      *ctx_, prefill_graph_, [&](const graph::Node& n) { return checkpoints::MaterializeParam(store, n); }, resources_,
      options_.progress);
  if (!s.ok()) return s;
  auto mapped = [&](size_t bytes, const char* name) -> absl::StatusOr<std::unique_ptr<vk::Buffer>> {
    return ctx_->CreateBuffer(std::max<size_t>(16, bytes), vk::BufferKind::kMappedDevice, name);
  };
  const size_t rows = static_cast<size_t>(batch_.max_sequences) * sizeof(int32_t);
  const size_t align = std::max<size_t>(sizeof(int32_t), ctx_->info().min_storage_buffer_offset_alignment);
  loop_slot_ = (rows + align - 1) / align * align;
  // Decode and mixed steps (one at a time) share the rows' token ids and chosen tokens.
  const size_t step_rows = static_cast<size_t>(std::max(batch_.max_sequences, MixedRowsAtMost())) * sizeof(int32_t);
  for (auto [buffer, bytes, name] : {std::tuple{&prompt_ids_, static_cast<size_t>(options_.prefill_chunk) * 4, "prompt"},
                                     std::tuple{&prefill_token_, size_t{4}, "prefill.token"},
                                     std::tuple{&decode_ids_, step_rows, "decode.ids"},
                                     std::tuple{&decode_tokens_, step_rows, "decode.tokens"},
                                     std::tuple{&loop_tokens_, loop_slot_ * static_cast<size_t>(gpu_loop() + 1), "decode.loop"}}) {
    absl::StatusOr<std::unique_ptr<vk::Buffer>> b = mapped(bytes, name);
    if (!b.ok()) return b.status();
    *buffer = *std::move(b);
  }
  const PlanTarget target{*ctx_, *pipelines_, caps_, resources_, options_.progress, options_.verbose};
  std::map<graph::ValueId, vk::Buffer*> external = {
      {*prefill_graph_.FindNamed(graph::OpKind::kInput, "ids"), prompt_ids_.get()},
      {*prefill_graph_.output("next_token"), prefill_token_.get()}};
  absl::StatusOr<std::unique_ptr<vk::Plan>> plan =
      CompilePlan(target, prefill_graph_, options_.prefill_chunk, external, "batch.prefill");
  if (!plan.ok()) return plan.status();
  prefill_ = *std::move(plan);
  prefill_logits_ = *prefill_graph_.output("logits");
  return absl::OkStatus();
}

absl::StatusOr<BatchEngine::DecodePlan*> BatchEngine::StepPlanFor(std::map<int, DecodePlan>& plans, const graph::Graph& g,
                                                                  int bucket, const std::string& name) {
  auto it = plans.find(bucket);
  if (it != plans.end()) return &it->second;
  const PlanTarget target{*ctx_, *pipelines_, caps_, resources_, options_.progress, options_.verbose};
  std::map<graph::ValueId, vk::Buffer*> external = {{*g.FindNamed(graph::OpKind::kInput, "ids"), decode_ids_.get()},
                                                    {*g.output("next_token"), decode_tokens_.get()}};
  absl::StatusOr<std::unique_ptr<vk::Plan>> plan = CompilePlan(target, g, bucket, external, absl::StrCat(name, bucket));
  if (!plan.ok()) return plan.status();
  DecodePlan& d = plans[bucket];
  d.plan = *std::move(plan);
  d.logits = *g.output("logits");
  return &d;
}

absl::StatusOr<BatchEngine::DecodePlan*> BatchEngine::DecodePlanFor(int rows) {
  const int bucket = Bucket(rows, batch_.max_sequences);
  return StepPlanFor(decode_, decode_graph(bucket), bucket, "batch.decode");
}

int BatchEngine::MixedRowsAtMost() const {
  // At most 512: the plan's logits take a row of the vocabulary each (256 MiB at 512 rows of 128k).
  return Bucket(batch_.max_sequences + static_cast<int>(options_.prefill_chunk), 512);
}

absl::Status BatchEngine::Prepare(int sequences, bool serving) {
  const bool warm = serving && idle();
  for (int rows = 1; rows <= std::min(sequences, batch_.max_sequences); rows *= 2) {
    absl::StatusOr<DecodePlan*> d = DecodePlanFor(rows);
    if (!d.ok()) return d.status();
    if (!serving) continue;
    const int bucket = Bucket(rows, batch_.max_sequences);
    if (gpu_loop() > 1) {
      if (absl::Status s = BuildLoop(**d, bucket); !s.ok()) return s;
      if (absl::Status s = warm ? WarmPlan(*(*d)->loop, decode_graph(bucket)) : absl::OkStatus(); !s.ok()) return s;
    }
    if (absl::Status s = warm ? WarmPlan(*(*d)->plan, decode_graph(bucket)) : absl::OkStatus(); !s.ok()) return s;
  }
  // From one row: a lone prompt's last row, or a one-token prompt, with no decode rows beside it.
  for (int rows = 1; serving && rows <= MixedRowsAtMost(); rows *= 2) {
    absl::StatusOr<DecodePlan*> d = StepPlanFor(mixed_, mixed_graph_, rows, "batch.mixed");
    if (!d.ok()) return d.status();
    if (absl::Status s = warm ? WarmPlan(*(*d)->plan, mixed_graph_) : absl::OkStatus(); !s.ok()) return s;
  }
  return warm ? WarmPlan(*prefill_, prefill_graph_) : absl::OkStatus();
}

int BatchEngine::plans_compiled() const {
  int n = prefill_ ? 1 : 0;
  for (const std::map<int, DecodePlan>* plans : {&decode_, &mixed_}) {
    for (const auto& [bucket, d] : *plans) n += (d.plan ? 1 : 0) + (d.loop ? 1 : 0);
  }
  return n;
}

int64_t BatchEngine::PagesHeldAtMost(int64_t positions) const {
  const int64_t all = CeilDiv(positions, batch_.page_rows);
  if (window_ == 0) return all;
  // A step of n <= prefill_chunk tokens at position c holds the pages of positions c + 1 - window
  // .. c + n - 1 (older ones were released after the step before).
  return std::min(all, CeilDiv(window_ + options_.prefill_chunk - 1, batch_.page_rows) + 1);
}

absl::StatusOr<int> BatchEngine::Add(std::span<const int32_t> prompt, int64_t max_new_tokens, bool want_logits) {
  if (prompt.empty()) return absl::InvalidArgumentError("an empty prompt");
  for (int32_t id : prompt) {
    if (id < 0 || id >= config_.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is outside the vocabulary [0, ", config_.vocab_size, ")"));
    }
  }
  if (max_new_tokens < 1) return absl::InvalidArgumentError("a sequence must ask for at least one token");
  const int64_t length = static_cast<int64_t>(prompt.size()) + max_new_tokens - 1;  // positions fed
  if (length > options_.context) {
    return absl::OutOfRangeError(absl::StrCat("a prompt of ", prompt.size(), " tokens and ", max_new_tokens,
                                              " new ones exceed the context size ", options_.context,
                                              " (raise it with -c, --ctx-size)"));
  }
  if (PagesHeldAtMost(length) > pool_->pages()) {
    return absl::ResourceExhaustedError(absl::StrCat("a prompt of ", prompt.size(), " tokens and ", max_new_tokens,
                                                     " new ones need more than the KV pool's ",
                                                     pool_->pages() * batch_.page_rows, " rows (--ctx-total)"));
  }
  const int id = next_id_++;
  Sequence& s = sequences_[id];
  s.tokens.assign(prompt.begin(), prompt.end());
  s.prompt = static_cast<int64_t>(prompt.size());
  s.max_new = max_new_tokens;
  s.want_logits = want_logits;
  queue_.push_back(id);
  Admit();
  return id;
}

// Admits queued sequences in order while fewer than max_sequences run and the pool can reserve
// their pages: each first takes the
// cached pages of its prompt's longest shared prefix (whole pages, never the one holding its last
// prompt token, which it must compute to get its first token's logits).
void BatchEngine::Admit() {
  while (!queue_.empty() && running() < batch_.max_sequences) {
    Sequence& s = sequences_.at(queue_.front());
    const int64_t needed = PagesHeldAtMost(s.prompt + s.max_new - 1);
    if (!pool_->Reserve(needed)) return;
    s.reserved = needed;
    uint64_t hash = 0;
    for (int64_t page = 0; window_ == 0 && (page + 1) * batch_.page_rows <= s.prompt - 1; ++page) {
      const std::span<const int32_t> rows(s.tokens.data() + page * batch_.page_rows, static_cast<size_t>(batch_.page_rows));
      hash = PagePool::ChainHash(hash, rows);
      std::optional<int32_t> shared = pool_->Share(hash);
      if (!shared) break;
      pool_->Unreserve(1);
      --s.reserved;
      s.pages.push_back(*shared);
      s.hashes.push_back(hash);
      s.computed += batch_.page_rows;
      s.shared += batch_.page_rows;
      shared_tokens_ += batch_.page_rows;
    }
    s.admitted = true;
    queue_.pop_front();
  }
}

void BatchEngine::EnsurePages(Sequence& s, int64_t positions) {
  while (static_cast<int64_t>(s.pages.size()) * batch_.page_rows < positions) {
    s.pages.push_back(pool_->Take());
    --s.reserved;
  }
}

void BatchEngine::RecycleWindowPages(Sequence& s) {
  if (window_ == 0) return;
  // The next step's first query is at s.computed; it needs keys from s.computed + 1 - window on.
  const int64_t oldest = s.computed + 1 - window_;
  for (size_t page = 0; page < s.pages.size() && static_cast<int64_t>(page + 1) * batch_.page_rows <= oldest; ++page) {
    if (s.pages[page] < 0) continue;
    pool_->Release(s.pages[page]);  // held by this sequence alone (nothing is shared with windows)
    s.pages[page] = -1;
    pool_->Reserve(1);  // the page just freed: the sequence's next page
    ++s.reserved;
  }
}

void BatchEngine::WriteTable(uint32_t* table, const Sequence& s) const {
  const int64_t entries = build_.paging.table_pages;
  for (int64_t i = 0; i < entries; ++i) {
    table[i] = i < static_cast<int64_t>(s.pages.size()) ? static_cast<uint32_t>(s.pages[static_cast<size_t>(i)]) : 0u;
  }
}

void BatchEngine::WriteRow(uint32_t* block, const codegen::StepBlockLayout& layout, int t, const Sequence& s,
                           int64_t position) const {
  block[layout.positions + static_cast<size_t>(t)] = static_cast<uint32_t>(position);
  WriteTable(block + layout.tables + static_cast<size_t>(t) * static_cast<size_t>(build_.paging.table_pages), s);
}

// Full pages of the prompt whose keys and values are computed are offered to later prompts (not
// where the pages of a window are recycled: a page holds its keys only while the window needs them).
void BatchEngine::PublishPromptPages(Sequence& s) {
  if (window_ > 0) return;
  const int64_t rows = batch_.page_rows;
  while (static_cast<int64_t>(s.hashes.size() + 1) * rows <= std::min(s.computed, s.prompt)) {
    const size_t page = s.hashes.size();
    const std::span<const int32_t> tokens(s.tokens.data() + page * static_cast<size_t>(rows), static_cast<size_t>(rows));
    const uint64_t hash = PagePool::ChainHash(s.hashes.empty() ? 0 : s.hashes.back(), tokens);
    s.hashes.push_back(hash);
    pool_->Publish(s.pages[page], hash);
  }
}

absl::Status BatchEngine::PrefillChunk(int id, Sequence& s, std::vector<StepToken>& out) {
  const int64_t n = std::min(options_.prefill_chunk, s.prompt - s.computed);
  EnsurePages(s, s.computed + n);
  std::memcpy(prompt_ids_->mapped(), s.tokens.data() + s.computed, static_cast<size_t>(n) * sizeof(int32_t));
  const codegen::StepBlockLayout layout = codegen::StepBlockLayoutOf(prefill_graph_.paging(), options_.prefill_chunk);
  uint32_t* block = prefill_->step_block();
  for (int64_t t = 0; t < n; ++t) block[layout.positions + static_cast<size_t>(t)] = static_cast<uint32_t>(s.computed + t);
  WriteTable(block + layout.tables, s);
  if (absl::Status st = prefill_->Run(static_cast<uint32_t>(n), static_cast<uint32_t>(s.computed)); !st.ok()) return st;
  s.computed += n;
  PublishPromptPages(s);
  RecycleWindowPages(s);
  if (s.computed < s.prompt) return absl::OkStatus();
  StepToken t{id, 0, s.computed, {}};
  std::memcpy(&t.token, prefill_token_->mapped(), sizeof(int32_t));
  if (s.want_logits) {
    t.logits.resize(static_cast<size_t>(config_.vocab_size));
    const vk::Slice& slice = prefill_->slice(prefill_logits_);
    if (absl::Status st = ctx_->Download(*slice.buffer, slice.offset, t.logits.data(), t.logits.size() * sizeof(float));
        !st.ok()) {
      return st;
    }
  }
  s.next = t.token;
  ++s.produced;
  out.push_back(std::move(t));
  return absl::OkStatus();
}

std::vector<int> BatchEngine::DecodingRows() const {
  std::vector<int> rows;  // at most max_sequences (Admit)
  for (const auto& [id, s] : sequences_) {
    if (s.admitted && s.next && s.produced < s.max_new) rows.push_back(id);
  }
  return rows;
}

absl::StatusOr<BatchEngine::DecodeRows> BatchEngine::PrepareDecode(std::vector<int> rows) {
  DecodeRows r;
  r.ids = std::move(rows);
  if (r.ids.empty()) return r;
  const int n = static_cast<int>(r.ids.size());
  absl::StatusOr<DecodePlan*> d = DecodePlanFor(n);
  if (!d.ok()) return d.status();
  r.plan = *d;
  vk::Plan& plan = *r.plan->plan;
  const codegen::StepBlockLayout layout = codegen::StepBlockLayoutOf(decode_graph_.paging(), plan.tokens());
  uint32_t* block = plan.step_block();
  int32_t* ids = static_cast<int32_t*>(decode_ids_->mapped());
  for (int t = 0; t < n; ++t) {
    Sequence& s = sequences_.at(r.ids[static_cast<size_t>(t)]);
    EnsurePages(s, s.computed + 1);
    ids[t] = *s.next;
    WriteRow(block, layout, t, s, s.computed);
  }
  return r;
}

absl::StatusOr<vk::ProfiledStep> BatchEngine::ProfileDecodeStep() {
  absl::StatusOr<DecodeRows> r = PrepareDecode(DecodingRows());
  if (!r.ok()) return r.status();
  if (r->ids.empty()) return absl::FailedPreconditionError("no sequence has a token to decode");
  profiled_ = r->plan;
  return r->plan->plan->RunProfiled(static_cast<uint32_t>(r->ids.size()), 0);
}

int BatchEngine::LoopSteps(const std::vector<int>& rows) const {
  const int steps = gpu_loop();
  for (const auto& [id, s] : sequences_) {
    if (s.admitted && s.computed < s.prompt) return 1;  // its prefill would wait for the whole loop
  }
  for (int id : rows) {
    const Sequence& s = sequences_.at(id);
    if (s.want_logits || s.max_new - s.produced < steps) return 1;
  }
  return steps;
}

absl::Status BatchEngine::BuildLoop(DecodePlan& d, int bucket) {
  if (d.loop) return absl::OkStatus();
  const graph::Graph& g = decode_graph(bucket);
  const graph::ValueId ids = *g.FindNamed(graph::OpKind::kInput, "ids"), next = *g.output("next_token");
  const size_t bytes = static_cast<size_t>(bucket) * sizeof(int32_t);
  const std::vector<vk::SteppedBinding> stepped = {{ids, loop_tokens_.get(), 0, loop_slot_, bytes, 0},
                                                   {next, loop_tokens_.get(), loop_slot_, loop_slot_, bytes, 0}};
  const PlanTarget target{*ctx_, *pipelines_, caps_, resources_, options_.progress, options_.verbose};
  absl::StatusOr<std::unique_ptr<vk::Plan>> plan =
      CompilePlan(target, g, bucket, {{ids, loop_tokens_.get()}, {next, loop_tokens_.get()}},
                  absl::StrCat("batch.decode", bucket, ".loop"), gpu_loop(), stepped);
  if (!plan.ok()) return plan.status();
  d.loop = *std::move(plan);
  return absl::OkStatus();
}

absl::Status BatchEngine::WarmPlan(vk::Plan& plan, const graph::Graph& g) {
  // One row at position 0 through page 0 of the pool (no sequence holds a page yet): drivers finish
  // compiling a pipeline at its first dispatch, which stays out of the first request's time.
  const codegen::StepBlockLayout layout = codegen::StepBlockLayoutOf(g.paging(), plan.tokens());
  for (int st = 0; st < plan.steps(); ++st) {
    uint32_t* block = plan.step_block(st);
    block[layout.positions] = 0;
    std::fill_n(block + layout.tables, static_cast<size_t>(build_.paging.table_pages), 0u);
  }
  const int32_t first_id = 0;
  for (vk::Buffer* ids : {prompt_ids_.get(), decode_ids_.get(), loop_tokens_.get()}) {
    std::memcpy(ids->mapped(), &first_id, sizeof(first_id));
  }
  return plan.Run(1, 0);
}

absl::Status BatchEngine::DecodeLoop(const std::vector<int>& rows, int steps, std::vector<StepToken>& out) {
  const int n = static_cast<int>(rows.size());
  absl::StatusOr<DecodePlan*> d = DecodePlanFor(n);
  if (!d.ok()) return d.status();
  const int bucket = Bucket(n, batch_.max_sequences);
  if (absl::Status st = BuildLoop(**d, bucket); !st.ok()) return st;
  vk::Plan& plan = *(*d)->loop;
  const codegen::StepBlockLayout layout = codegen::StepBlockLayoutOf(decode_graph_.paging(), bucket);
  char* slots = static_cast<char*>(loop_tokens_->mapped());
  for (int t = 0; t < n; ++t) {
    Sequence& s = sequences_.at(rows[static_cast<size_t>(t)]);
    EnsurePages(s, s.computed + steps);
    reinterpret_cast<int32_t*>(slots)[t] = *s.next;
    for (int st = 0; st < steps; ++st) WriteRow(plan.step_block(st), layout, t, s, s.computed + st);
  }
  if (absl::Status st = plan.Run(static_cast<uint32_t>(n), 0); !st.ok()) return st;
  for (int t = 0; t < n; ++t) {
    const int id = rows[static_cast<size_t>(t)];
    Sequence& s = sequences_.at(id);
    for (int st = 0; st < steps; ++st) {
      const int32_t fed = reinterpret_cast<const int32_t*>(slots + static_cast<size_t>(st) * loop_slot_)[t];
      const int32_t chosen = reinterpret_cast<const int32_t*>(slots + static_cast<size_t>(st + 1) * loop_slot_)[t];
      s.tokens.push_back(fed);
      ++s.computed;
      out.push_back(StepToken{id, chosen, s.computed, {}});
    }
    s.next = out.back().token;
    s.produced += steps;
    RecycleWindowPages(s);
  }
  return absl::OkStatus();
}

absl::Status BatchEngine::DecodeStep(std::vector<StepToken>& out) {
  std::vector<int> decoding = DecodingRows();
  if (decoding.empty()) return absl::OkStatus();
  if (const int steps = LoopSteps(decoding); steps > 1) return DecodeLoop(decoding, steps, out);
  absl::StatusOr<DecodeRows> prepared = PrepareDecode(std::move(decoding));
  if (!prepared.ok()) return prepared.status();
  if (absl::Status st = prepared->plan->plan->Run(static_cast<uint32_t>(prepared->ids.size()), 0); !st.ok()) return st;
  return TakeDecodeRows(prepared->ids, *prepared->plan, out);
}

absl::Status BatchEngine::TakeDecodeRows(const std::vector<int>& rows, const DecodePlan& d, std::vector<StepToken>& out) {
  const int n = static_cast<int>(rows.size());
  const int32_t* chosen = static_cast<const int32_t*>(decode_tokens_->mapped());
  // The rows' logits in one download, where any row asks for them.
  const size_t vocab = static_cast<size_t>(config_.vocab_size);
  std::vector<float> logits;
  if (std::any_of(rows.begin(), rows.end(), [&](int id) { return sequences_.at(id).want_logits; })) {
    logits.resize(static_cast<size_t>(n) * vocab);
    const vk::Slice& slice = d.plan->slice(d.logits);
    if (absl::Status st = ctx_->Download(*slice.buffer, slice.offset, logits.data(), logits.size() * sizeof(float));
        !st.ok()) {
      return st;
    }
  }
  for (int t = 0; t < n; ++t) {
    const int id = rows[static_cast<size_t>(t)];
    Sequence& s = sequences_.at(id);
    s.tokens.push_back(*s.next);
    ++s.computed;
    RecycleWindowPages(s);
    StepToken tok{id, chosen[t], s.computed, {}};
    if (s.want_logits) {
      tok.logits.assign(logits.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(t) * vocab),
                        logits.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(t + 1) * vocab));
    }
    s.next = tok.token;
    ++s.produced;
    out.push_back(std::move(tok));
  }
  return absl::OkStatus();
}

int BatchEngine::PromptsWaiting() const {
  return static_cast<int>(std::count_if(sequences_.begin(), sequences_.end(), [](const auto& e) {
    return e.second.admitted && e.second.computed < e.second.prompt;
  }));
}

absl::StatusOr<int64_t> BatchEngine::MixedStep(std::vector<int> rows, int64_t budget, std::vector<StepToken>& out) {
  const int n = static_cast<int>(rows.size());
  // The prompt rows: oldest prompts first, at most a chunk of each (a sliding window's pages are
  // reserved for that), within the budget and the plan's rows.
  const int64_t room = std::min<int64_t>(budget, MixedRowsAtMost() - n);
  std::vector<std::pair<int, int64_t>> parts;  // (sequence, prompt rows)
  int64_t prompt_rows = 0;
  for (auto& [id, s] : sequences_) {
    if (prompt_rows >= room) break;
    if (!s.admitted || s.computed >= s.prompt) continue;
    parts.emplace_back(id, std::min({room - prompt_rows, s.prompt - s.computed, options_.prefill_chunk}));
    prompt_rows += parts.back().second;
  }
  const int total = n + static_cast<int>(prompt_rows);
  const int bucket = Bucket(total, MixedRowsAtMost());
  absl::StatusOr<DecodePlan*> d = StepPlanFor(mixed_, mixed_graph_, bucket, "batch.mixed");
  if (!d.ok()) return d.status();
  vk::Plan& plan = *(*d)->plan;
  const codegen::StepBlockLayout layout = codegen::StepBlockLayoutOf(mixed_graph_.paging(), bucket);
  uint32_t* block = plan.step_block();
  int32_t* ids = static_cast<int32_t*>(decode_ids_->mapped());
  for (int t = 0; t < n; ++t) {
    Sequence& s = sequences_.at(rows[static_cast<size_t>(t)]);
    EnsurePages(s, s.computed + 1);
    ids[t] = *s.next;
    WriteRow(block, layout, t, s, s.computed);
  }
  int t = n;
  for (const auto& [id, k] : parts) {
    Sequence& s = sequences_.at(id);
    EnsurePages(s, s.computed + k);
    for (int64_t j = 0; j < k; ++j, ++t) {
      ids[t] = s.tokens[static_cast<size_t>(s.computed + j)];
      WriteRow(block, layout, t, s, s.computed + j);
    }
  }
  if (absl::Status st = plan.Run(static_cast<uint32_t>(total), 0); !st.ok()) return st;
  // The prompts' rows, then the decode rows.
  const int32_t* chosen = static_cast<const int32_t*>(decode_tokens_->mapped());
  const vk::Slice& logits = plan.slice((*d)->logits);
  const size_t vocab = static_cast<size_t>(config_.vocab_size);
  t = n;
  for (const auto& [id, k] : parts) {
    Sequence& s = sequences_.at(id);
    t += static_cast<int>(k);
    s.computed += k;
    PublishPromptPages(s);
    RecycleWindowPages(s);
    if (s.computed < s.prompt) continue;
    StepToken tok{id, chosen[t - 1], s.computed, {}};
    if (s.want_logits) {
      tok.logits.resize(vocab);
      if (absl::Status st = ctx_->Download(*logits.buffer, logits.offset + static_cast<size_t>(t - 1) * vocab * sizeof(float),
                                           tok.logits.data(), vocab * sizeof(float));
          !st.ok()) {
        return st;
      }
    }
    s.next = tok.token;
    ++s.produced;
    out.push_back(std::move(tok));
  }
  if (absl::Status st = TakeDecodeRows(rows, **d, out); !st.ok()) return st;
  return prompt_rows;
}

absl::StatusOr<std::vector<StepToken>> BatchEngine::Step(bool decode) {
  std::vector<StepToken> out;
  // Decode first, from the tokens the last step chose, with rows of the waiting prompts riding
  // along in the same step where there are any (a mixed step: the weights are read once for both);
  // then the rest of the prompts up to the budget: several packed into the rows of one mixed plan,
  // one alone in chunks of the prefill plan (whose attention stages keys for blocks of queries). A
  // sequence that joins delays the others by at most that budget's prefill.
  int64_t budget = batch_.prefill_budget;
  if (decode) {
    std::vector<int> rows = DecodingRows();
    if (!rows.empty() && static_cast<int>(rows.size()) < MixedRowsAtMost() && PromptsWaiting() > 0) {
      absl::StatusOr<int64_t> used = MixedStep(std::move(rows), budget, out);
      if (!used.ok()) return used.status();
      budget -= *used;
    } else if (absl::Status s = DecodeStep(out); !s.ok()) {
      return s;
    }
  }
  while (budget > 0) {
    const int waiting = PromptsWaiting();
    if (waiting == 0) break;
    if (waiting > 1) {
      absl::StatusOr<int64_t> used = MixedStep({}, budget, out);
      if (!used.ok()) return used.status();
      budget -= *used;
      continue;
    }
    for (auto& [id, s] : sequences_) {
      if (!s.admitted || s.computed >= s.prompt) continue;
      budget -= std::min(options_.prefill_chunk, s.prompt - s.computed);
      if (absl::Status st = PrefillChunk(id, s, out); !st.ok()) return st;
      break;
    }
  }
  return out;
}

absl::Status BatchEngine::SetNext(int id, int32_t token) {
  auto it = sequences_.find(id);
  if (it == sequences_.end() || !it->second.next) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", id, " has no token to replace"));
  }
  if (token < 0 || token >= config_.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("token id ", token, " is outside the vocabulary"));
  }
  it->second.next = token;
  return absl::OkStatus();
}

int64_t BatchEngine::shared_prompt_tokens(int id) const {
  auto it = sequences_.find(id);
  return it == sequences_.end() ? 0 : it->second.shared;
}

void BatchEngine::Remove(int id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return;
  Sequence& s = it->second;
  for (int32_t page : s.pages) {
    if (page >= 0) pool_->Release(page);
  }
  if (s.admitted) pool_->Unreserve(s.reserved);
  queue_.erase(std::remove(queue_.begin(), queue_.end(), id), queue_.end());
  sequences_.erase(it);
  Admit();
}

}  // namespace doppler::runtime
