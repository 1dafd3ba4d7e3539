#include "runtime/engine.h"

#include "runtime/decode_activations.h"
#include "runtime/model_source.h"
#include "runtime/plan_compile.h"
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoints/weights.h"
#include "graph/printer.h"

namespace doppler::runtime {
Engine::~Engine() {
  // A loop started ahead writes buffers that go with the engine: it must finish first.
  (void)DropAhead();
}

bool IsGgufModel(const std::filesystem::path& path) {
  std::error_code ec;
  return !std::filesystem::is_directory(path, ec) && std::filesystem::exists(path, ec);
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  std::unique_ptr<Engine> e(new Engine());
  e->options_ = options;
  absl::StatusOr<OpenedModel> model = OpenModel(e->options_);
  if (!model.ok()) return model.status();
  e->config_ = std::move(model->config);
  e->store_ = std::move(model->store);
  e->build_ = std::move(model->build);
  absl::StatusOr<graph::Graph> g = StepGraph(e->config_, e->build_, options.sampling, options.passes);
  if (!g.ok()) return g.status();
  e->graph_ = *std::move(g);

  vk::ContextOptions vo;
  vo.validation = options.validation;
  vo.device_index = options.device_index;
  absl::StatusOr<std::unique_ptr<vk::Context>> ctx = vk::Context::Create(vo);
  if (!ctx.ok()) return ctx.status();
  e->ctx_ = *std::move(ctx);
  e->caps_ = vk::TargetCapsOf(e->ctx_->info());
  if (absl::Status s = PrintDeviceChoices(e->caps_, options.verbose); !s.ok()) return s;
  e->pipelines_ = std::make_unique<vk::PipelineCache>(*e->ctx_);

  if (absl::Status s = e->Load(); !s.ok()) return s;
  if (absl::Status s = e->ChooseDecodeActivations(); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<vk::Plan>> decode = e->BuildPlan(e->decode_graph_, 1, e->token_.get(), "decode");
  if (!decode.ok()) return decode.status();
  e->decode_ = *std::move(decode);
  absl::StatusOr<std::unique_ptr<vk::Plan>> prefill =
      e->BuildPlan(e->graph_, e->options_.prefill_chunk, e->prompt_.get(), "prefill");
  if (!prefill.ok()) return prefill.status();
  e->prefill_ = *std::move(prefill);
  if (absl::Status s = e->BuildDecodeLoop(); !s.ok()) return s;
  if (absl::Status s = e->Warm(); !s.ok()) return s;
  return e;
}

absl::Status Engine::Warm() {
  // Drivers finish compiling a pipeline at its first dispatch: one token through the prefill plan,
  // then one decode step, keeps that out of the first prompt's time (the cache rows and the token
  // they write are overwritten by the sequence that follows, from position 0).
  if (options_.progress) std::fprintf(stderr, "first run of the plans (the driver compiles at first use)...");
  const int32_t first_id = 0;
  std::memcpy(prompt_->mapped(), &first_id, sizeof(first_id));
  absl::Status s = prefill_->Run(1, 0);
  if (s.ok()) s = decode_->Run(1, 0);
  if (options_.progress) std::fprintf(stderr, " %s\n", s.ok() ? "done" : "failed");
  return s;
}

absl::Status Engine::ChooseDecodeActivations() {
  absl::StatusOr<graph::Graph> g = WithDecodeActivations(graph_, options_.decode_activations, caps_, ctx_->info().name);
  if (!g.ok()) return g.status();
  decode_graph_ = *std::move(g);
  return absl::OkStatus();
}

absl::Status Engine::BuildDecodeLoop() {
  if (options_.gpu_loop < 1) {
    return absl::InvalidArgumentError(absl::StrCat("the GPU decode loop needs at least one step, not ", options_.gpu_loop));
  }
  const int steps = static_cast<int>(std::min<int64_t>(options_.gpu_loop, options_.prefill_chunk));
  if (steps == 1) return absl::OkStatus();
  const size_t align = std::max<size_t>(sizeof(int32_t), ctx_->info().min_storage_buffer_offset_alignment);
  loop_slot_ = align;
  // A ring of 2 · steps token slots: the first loop's steps read slots 0 .. steps - 1 and write
  // 1 .. steps, the second's read steps .. 2 · steps - 1 and write steps + 1 .. 2 · steps - 1 and 0,
  // where the first reads again.
  const size_t ring = loop_slot_ * static_cast<size_t>(2 * steps);
  absl::StatusOr<std::unique_ptr<vk::Buffer>> slots = ctx_->CreateBuffer(ring, vk::BufferKind::kMappedDevice, "decode_loop.tokens");
  if (!slots.ok()) return slots.status();
  loop_tokens_ = *std::move(slots);
  const std::optional<graph::ValueId> ids = decode_graph_.FindNamed(graph::OpKind::kInput, "ids");
  if (!ids) return absl::InvalidArgumentError("the step graph has no \"ids\" input");
  const graph::ValueId next = *decode_graph_.output("next_token");
  for (int half = 0; half < 2; ++half) {
    // The second loop runs only where a loop started ahead of the host cannot overwrite cache rows
    // still needed: a sliding window's cache keeps prefill_chunk spare rows, and a stop may come
    // at the first of the two loops' steps.
    if (half == 1 && 2 * steps > options_.prefill_chunk) break;
    const size_t first = loop_slot_ * static_cast<size_t>(half * steps);
    const std::vector<vk::SteppedBinding> stepped = {{*ids, loop_tokens_.get(), first, loop_slot_, sizeof(int32_t), ring},
                                                     {next, loop_tokens_.get(), first + loop_slot_, loop_slot_, sizeof(int32_t), ring}};
    absl::StatusOr<std::unique_ptr<vk::Plan>> plan =
        BuildPlan(decode_graph_, 1, token_.get(), half == 0 ? "decode_loop" : "decode_loop.ahead", steps, stepped);
    if (!plan.ok()) return plan.status();
    decode_loops_[half] = *std::move(plan);
  }
  return absl::OkStatus();
}

// Uploads every param and const and zeroes every state, once, shared by all plans.
absl::Status Engine::Load() {
  const formats::WeightStore& store = *store_;
  absl::Status s = CreateResources(
      *ctx_, graph_, [&](const graph::Node& n) { return checkpoints::MaterializeParam(store, n); }, resources_,
      options_.progress);
  if (!s.ok()) return s;
  absl::StatusOr<std::unique_ptr<vk::Buffer>> token = ctx_->CreateBuffer(16, vk::BufferKind::kMappedDevice, "token");
  if (!token.ok()) return token.status();
  token_ = *std::move(token);
  absl::StatusOr<std::unique_ptr<vk::Buffer>> prompt = ctx_->CreateBuffer(
      static_cast<size_t>(options_.prefill_chunk) * sizeof(int32_t), vk::BufferKind::kMappedDevice, "prompt");
  if (!prompt.ok()) return prompt.status();
  prompt_ = *std::move(prompt);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<vk::Plan>> Engine::BuildPlan(const graph::Graph& g, int64_t tokens, vk::Buffer* ids,
                                                            const std::string& name, int steps,
                                                            const std::vector<vk::SteppedBinding>& stepped) {
  std::map<graph::ValueId, vk::Buffer*> external;
  for (const graph::Node& n : g.nodes()) {
    if (n.kind == graph::OpKind::kInput) external[n.id] = ids;
  }
  external[*g.output("next_token")] = token_.get();
  const PlanTarget target{*ctx_, *pipelines_, caps_, resources_, options_.progress, options_.verbose};
  return CompilePlan(target, g, tokens, external, name, steps, stepped);
}

absl::Status Engine::CheckIds(std::span<const int32_t> ids) const {
  if (ids.empty()) return absl::InvalidArgumentError("no token ids to feed");
  for (int32_t id : ids) {
    if (id < 0 || id >= config_.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is outside the vocabulary [0, ", config_.vocab_size, ")"));
    }
  }
  if (position_ + static_cast<int64_t>(ids.size()) > options_.context) {
    return absl::OutOfRangeError(absl::StrCat(position_ + static_cast<int64_t>(ids.size()),
                                              " tokens exceed the context size ", options_.context,
                                              " (raise it with -c, --ctx-size)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int32_t> Engine::ReadToken() const {
  int32_t id;
  std::memcpy(&id, token_->mapped(), sizeof(id));
  return id;
}

absl::StatusOr<int32_t> Engine::Prefill(std::span<const int32_t> ids) {
  if (absl::Status s = DropAhead(); !s.ok()) return s;
  if (absl::Status s = CheckIds(ids); !s.ok()) return s;
  for (size_t start = 0; start < ids.size(); start += static_cast<size_t>(options_.prefill_chunk)) {
    const size_t n = std::min(ids.size() - start, static_cast<size_t>(options_.prefill_chunk));
    std::memcpy(prompt_->mapped(), ids.data() + start, n * sizeof(int32_t));
    if (absl::Status s = prefill_->Run(static_cast<uint32_t>(n), static_cast<uint32_t>(position_)); !s.ok()) return s;
    position_ += static_cast<int64_t>(n);
  }
  return ReadToken();
}

absl::StatusOr<int32_t> Engine::DecodeNext() {
  if (absl::Status s = DropAhead(); !s.ok()) return s;
  if (position_ + 1 > options_.context) {
    return absl::OutOfRangeError(absl::StrCat("the context of ", options_.context, " tokens is full"));
  }
  if (absl::Status s = decode_->Run(1, static_cast<uint32_t>(position_)); !s.ok()) return s;
  ++position_;
  return ReadToken();
}

absl::Status Engine::DropAhead() {
  if (ahead_ < 0) return absl::OkStatus();
  const int half = ahead_;
  ahead_ = -1;
  return decode_loops_[half]->Finish();
}

absl::StatusOr<std::vector<int32_t>> Engine::DecodeUpTo(int64_t wanted) {
  const int steps = gpu_loop();
  if (!decode_loops_[0] || wanted < steps || position_ + steps > options_.context) {
    absl::StatusOr<int32_t> t = DecodeNext();
    if (!t.ok()) return t.status();
    return std::vector<int32_t>{*t};
  }
  // The loop for position_: the one started ahead at the last call, else the first loop from the
  // token the one-step plan would feed.
  int half = ahead_;
  ahead_ = -1;
  if (half < 0) {
    half = 0;
    std::memcpy(loop_tokens_->mapped(), token_->mapped(), sizeof(int32_t));
    if (absl::Status s = decode_loops_[0]->Start(1, static_cast<uint32_t>(position_)); !s.ok()) return s;
  }
  // Where the caller wants another loop after this one, the other loop starts now, from the token
  // this one leaves in the ring, so that the GPU runs it while the host reads this one's tokens.
  const int other = 1 - half;
  if (decode_loops_[other] && wanted >= 2 * steps && position_ + 2 * steps <= options_.context) {
    absl::Status s = decode_loops_[other]->Start(1, static_cast<uint32_t>(position_ + steps));
    if (!s.ok()) {
      (void)decode_loops_[half]->Finish();
      return s;
    }
    ahead_ = other;
  }
  if (absl::Status s = decode_loops_[half]->Finish(); !s.ok()) return s;
  position_ += steps;
  std::vector<int32_t> out(static_cast<size_t>(steps));
  for (int i = 0; i < steps; ++i) {
    const size_t slot = static_cast<size_t>((half * steps + i + 1) % (2 * steps));
    std::memcpy(&out[static_cast<size_t>(i)], static_cast<const char*>(loop_tokens_->mapped()) + loop_slot_ * slot, sizeof(int32_t));
  }
  std::memcpy(token_->mapped(), &out.back(), sizeof(int32_t));  // what the one-step plan feeds next
  return out;
}

absl::Status Engine::Rewind(int64_t position, int32_t next_token) {
  if (absl::Status s = DropAhead(); !s.ok()) return s;
  if (position < 0 || position > position_) {
    return absl::InvalidArgumentError(absl::StrCat("cannot rewind to position ", position, " from ", position_));
  }
  position_ = position;
  std::memcpy(token_->mapped(), &next_token, sizeof(int32_t));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<vk::ProfiledStep>> Engine::ProfileDecodeSteps(int64_t steps) {
  if (absl::Status s = DropAhead(); !s.ok()) return s;
  std::vector<vk::ProfiledStep> samples;
  while (static_cast<int64_t>(samples.size()) < steps && position_ < options_.context) {
    absl::StatusOr<vk::ProfiledStep> ns = decode_->RunProfiled(1, static_cast<uint32_t>(position_));
    if (!ns.ok()) return ns.status();
    ++position_;
    samples.push_back(*std::move(ns));
  }
  return samples;
}

absl::StatusOr<vk::ProfiledStep> Engine::ProfilePrefillChunk(std::span<const int32_t> ids) {
  if (absl::Status s = DropAhead(); !s.ok()) return s;
  if (absl::Status s = CheckIds(ids); !s.ok()) return s;
  if (ids.size() > static_cast<size_t>(options_.prefill_chunk)) {
    return absl::InvalidArgumentError(absl::StrCat("a profiled prefill chunk holds at most ", options_.prefill_chunk,
                                                   " tokens, got ", ids.size()));
  }
  std::memcpy(prompt_->mapped(), ids.data(), ids.size() * sizeof(int32_t));
  absl::StatusOr<vk::ProfiledStep> ns =
      prefill_->RunProfiled(static_cast<uint32_t>(ids.size()), static_cast<uint32_t>(position_));
  if (!ns.ok()) return ns.status();
  position_ += static_cast<int64_t>(ids.size());
  return ns;
}

absl::StatusOr<std::vector<float>> Engine::PrefillLogits(std::span<const int32_t> ids) {
  if (absl::Status s = DropAhead(); !s.ok()) return s;
  if (absl::Status s = CheckIds(ids); !s.ok()) return s;
  if (!logits_) {
    models::BuildOptions all = build_;
    all.logits_all_tokens = true;
    // Logits are what is read here; the token it also picks is greedy.
    absl::StatusOr<graph::Graph> g = StepGraph(config_, all, SamplingOptions{}, options_.passes);
    if (!g.ok()) return g.status();
    absl::StatusOr<std::unique_ptr<vk::Plan>> plan = BuildPlan(*g, options_.prefill_chunk, prompt_.get(), "logits");
    if (!plan.ok()) return plan.status();
    logits_ = *std::move(plan);
    logits_output_ = *g->output("logits");
  }
  const size_t vocab = static_cast<size_t>(config_.vocab_size);
  std::vector<float> out(ids.size() * vocab);
  for (size_t start = 0; start < ids.size(); start += static_cast<size_t>(options_.prefill_chunk)) {
    const size_t n = std::min(ids.size() - start, static_cast<size_t>(options_.prefill_chunk));
    std::memcpy(prompt_->mapped(), ids.data() + start, n * sizeof(int32_t));
    if (absl::Status s = logits_->Run(static_cast<uint32_t>(n), static_cast<uint32_t>(position_)); !s.ok()) return s;
    if (absl::Status s = ctx_->Download(*logits_->slice(logits_output_).buffer, logits_->slice(logits_output_).offset, &out[start * vocab],
                                        n * vocab * sizeof(float));
        !s.ok()) {
      return s;
    }
    position_ += static_cast<int64_t>(n);
  }
  return out;
}

absl::StatusOr<std::vector<float>> Engine::DecodeLogits(int32_t id) {
  if (absl::Status s = DropAhead(); !s.ok()) return s;
  const int32_t ids[] = {id};
  if (absl::Status s = CheckIds(ids); !s.ok()) return s;
  std::memcpy(token_->mapped(), &id, sizeof(id));
  if (absl::Status s = decode_->Run(1, static_cast<uint32_t>(position_)); !s.ok()) return s;
  ++position_;
  std::vector<float> out(static_cast<size_t>(config_.vocab_size));
  const auto& logits = decode_->slice(*decode_graph_.output("logits"));
  if (absl::Status s = ctx_->Download(*logits.buffer, logits.offset, out.data(), out.size() * sizeof(float)); !s.ok()) {
    return s;
  }
  return out;
}

}  // namespace doppler::runtime
