// The batched engine: many sequences at once over a paged KV cache (graph/paging.h).
//
// Sequences join (Add) and leave (Remove) between any two steps. A step (Step) runs one decode step
// of every sequence that has a token to feed, all of them through one replayed plan, with rows of
// the prompts still waiting for their prefill as further rows of the same plan (a mixed step),
// then more of those prompts, oldest first, up to a budget of prompt tokens (several packed into
// one mixed plan's rows, one alone in chunks of the prefill plan): decode plans are compiled once for each
// batch-size bucket (1, 2, 4, ... up to max_sequences) and replayed. Each sequence has a page
// table; full pages of prompts are shared by prompts that begin alike (runtime/page_pool.h). The
// next token of every row is chosen on the GPU (argmax); a caller that samples reads the row's
// logits and says which token to feed instead (SetNext). Where no running sequence wants logits,
// a step runs several decode steps in one submit (the GPU loop), each feeding the next the tokens it
// chose, and returns several tokens a sequence, in order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "backend_vk/context.h"
#include "backend_vk/pipeline_cache.h"
#include "backend_vk/plan.h"
#include "codegen/step_rows.h"
#include "codegen/tuning/coop_rows.h"
#include "formats/weight_store.h"
#include "graph/graph.h"
#include "models/architecture.h"
#include "runtime/engine.h"
#include "runtime/page_pool.h"
#include "runtime/resources.h"

namespace doppler::runtime {

// Decode buckets up to this many rows round x through q8 (codegen/matmul.h: the q8 variant is a
// matrix-vector kernel for at most kGemvMaxBucket rows), but for those that the cooperative-matrix
// variant for few rows takes (codegen/tuning/coop_rows.h, CoopRowsTakeBatchedDecode): they take the
// graph without x_quant, whose products reach it.
inline constexpr int kQ8MaxRows = 16;

struct BatchOptions {
  int max_sequences = 16;  // the largest decode batch
  int64_t page_rows = 16;  // KV cache rows a page
  // Tokens the KV pool holds across all sequences; 0: max_sequences full contexts, as far as the
  // device's memory (less the weights) allows, and at least one context.
  int64_t ctx_total = 0;
  // Prompt tokens a step prefills at most (in chunks of EngineOptions::prefill_chunk, at least one
  // chunk), across the sequences still reading their prompts: more lets a burst of requests start
  // sooner, at the cost of a longer pause for the running ones.
  int64_t prefill_budget = 2048;
};

// What a step produced for one sequence: its next token (the greedy choice), with the logits it was
// chosen from where the sequence asked for them.
struct StepToken {
  int sequence = -1;
  int32_t token = -1;
  int64_t position = 0;  // the position the token was predicted for
  std::vector<float> logits;
};

class BatchEngine {
 public:
  static absl::StatusOr<std::unique_ptr<BatchEngine>> Create(EngineOptions options, const BatchOptions& batch);
  ~BatchEngine();

  // Queues a sequence that will produce up to `max_new_tokens` tokens after `prompt`. It is admitted
  // when fewer than max_sequences run and the pool can reserve the pages for all of them. Returns
  // its id. A prompt and generation longer than the context or the whole pool is an error.
  absl::StatusOr<int> Add(std::span<const int32_t> prompt, int64_t max_new_tokens, bool want_logits = false);
  // One step (see above). Returns the tokens produced, in order (several a sequence after a GPU loop). With decode false,
  // only the prefill chunk (a benchmark's prefill phase).
  absl::StatusOr<std::vector<StepToken>> Step(bool decode = true);
  // The token sequence `id` feeds next, instead of the one its last step chose.
  absl::Status SetNext(int id, int32_t token);
  // The sequence leaves (its pages return to the pool; full prompt pages stay cached for others).
  void Remove(int id);

  // Compiles the decode plans of every bucket up to `sequences` (otherwise each is built at first
  // use); `serving` also those of the GPU loops and the mixed steps, and runs every plan once while
  // no sequence holds a page (the driver's compilation at a pipeline's first dispatch is then
  // out of the first requests' time).
  absl::Status Prepare(int sequences, bool serving = false);
  // The plans compiled so far (decode and mixed buckets, GPU loops, the prefill plan): after
  // Prepare(.., serving = true), a step never compiles another.
  int plans_compiled() const;
  // Runs the next decode step of the running sequences through its plan's profiling recordings
  // (vk::Plan::RunProfiled), without taking its tokens: the sequences stay where they were, and
  // the next step overwrites what it wrote. profiled_plan() and decode_graph() describe it.
  absl::StatusOr<vk::ProfiledStep> ProfileDecodeStep();
  const vk::Plan* profiled_plan() const { return profiled_ ? profiled_->plan.get() : nullptr; }
  const graph::Graph& decode_graph(int rows) const {
    return rows <= kQ8MaxRows && !codegen::tuning::CoopRowsTakeBatchedDecode(rows, coop_rows_from_) ? decode_q8_graph_
                                                                                                     : decode_graph_;
  }

  bool idle() const { return sequences_.empty(); }
  int waiting() const { return static_cast<int>(queue_.size()); }
  int running() const { return static_cast<int>(sequences_.size() - queue_.size()); }
  // Prompt tokens whose keys and values came from another sequence's pages (prefix sharing): in
  // all, and of sequence `id` (known once it is admitted).
  int64_t shared_prompt_tokens() const { return shared_tokens_; }
  int64_t shared_prompt_tokens(int id) const;
  // The fraction of the KV pool's pages held or reserved (0..1).
  double pool_usage() const {
    return 1.0 - static_cast<double>(pool_->available()) / static_cast<double>(pool_->pages());
  }
  int64_t pool_pages() const { return pool_->pages(); }
  int max_sequences() const { return batch_.max_sequences; }
  // Decode steps recorded back to back in one submit (EngineOptions::gpu_loop, at most the prefill
  // chunk): a step of sequences that want no logits gives each up to that many tokens.
  int gpu_loop() const { return static_cast<int>(std::clamp<int64_t>(options_.gpu_loop, 1, options_.prefill_chunk)); }
  int64_t page_rows() const { return batch_.page_rows; }
  const formats::ModelConfig& config() const { return config_; }
  const vk::Context& device() const { return *ctx_; }
  int64_t context() const { return options_.context; }

 private:
  struct Sequence {
    std::vector<int32_t> tokens;  // the prompt, then the tokens fed since
    int64_t prompt = 0;           // prompt tokens
    int64_t computed = 0;         // positions whose keys and values are in the cache
    int64_t max_new = 0, produced = 0;
    int64_t reserved = 0;         // pages reserved and not yet taken
    int64_t shared = 0;           // prompt tokens in pages shared with other sequences
    std::vector<int32_t> pages;   // the page table (-1: a page out of the window, released)
    std::vector<uint64_t> hashes; // the chain hash of each full prompt page, as far as known
    std::optional<int32_t> next;  // the token the next decode step feeds
    bool want_logits = false, admitted = false;
  };
  struct DecodePlan {
    std::unique_ptr<vk::Plan> plan;
    // gpu_loop() steps in one submit (built at first use): step s reads its rows' tokens from
    // slot s of loop_tokens_ and writes the next ones to slot s + 1.
    std::unique_ptr<vk::Plan> loop;
    graph::ValueId logits = -1;
  };

  BatchEngine() = default;
  absl::Status Load();
  void Admit();
  absl::Status PrefillChunk(int id, Sequence& s, std::vector<StepToken>& out);
  // The running sequences' ids, rows in order, and their plan, with the step block written.
  struct DecodeRows {
    std::vector<int> ids;
    DecodePlan* plan = nullptr;
  };
  std::vector<int> DecodingRows() const;  // the sequences with a token to feed, in id order
  absl::StatusOr<DecodeRows> PrepareDecode(std::vector<int> rows);
  absl::Status DecodeStep(std::vector<StepToken>& out);
  // Decode steps a step runs in one submit for these rows: gpu_loop() where none wants logits, each
  // has that many tokens left and no admitted sequence waits for its prompt's prefill, else 1.
  int LoopSteps(const std::vector<int>& rows) const;
  absl::Status DecodeLoop(const std::vector<int>& rows, int steps, std::vector<StepToken>& out);
  // d's loop plan (gpu_loop() steps of bucket rows), built once.
  absl::Status BuildLoop(DecodePlan& d, int bucket);
  // Runs `plan` (of graph g) once on one row at position 0 of page 0.
  absl::Status WarmPlan(vk::Plan& plan, const graph::Graph& g);
  absl::StatusOr<DecodePlan*> DecodePlanFor(int rows);
  // The plan of graph `g` at `bucket` rows in `plans` (compiled at first use).
  absl::StatusOr<DecodePlan*> StepPlanFor(std::map<int, DecodePlan>& plans, const graph::Graph& g, int bucket,
                                          const std::string& name);
  // The rows of a mixed step at most: the largest batch and a prompt chunk, as a power of two, at
  // most 512.
  int MixedRowsAtMost() const;
  // Admitted sequences still reading their prompts.
  int PromptsWaiting() const;
  // One decode step of `rows` (maybe none) with prompt rows of the waiting sequences after them (at
  // most a chunk of each, and `budget` in all) in one plan of mixed_graph_. Returns the prompt rows
  // it took.
  absl::StatusOr<int64_t> MixedStep(std::vector<int> rows, int64_t budget, std::vector<StepToken>& out);
  // The decode rows' chosen tokens (and logits, where wanted) after a step of plan `d` ran them as its
  // first rows.
  absl::Status TakeDecodeRows(const std::vector<int>& rows, const DecodePlan& d, std::vector<StepToken>& out);
  void EnsurePages(Sequence& s, int64_t positions);
  // Pages a sequence of `positions` positions holds at once: all of them, or with window_ those of
  // a window and a prefill chunk.
  int64_t PagesHeldAtMost(int64_t positions) const;
  // With window_: releases the pages no later query of `s` reads (their table entries become -1).
  void RecycleWindowPages(Sequence& s);
  void WriteTable(uint32_t* table, const Sequence& s) const;
  // Row t of a step block: its position and its sequence's page table.
  void WriteRow(uint32_t* block, const codegen::StepBlockLayout& layout, int t, const Sequence& s,
                int64_t position) const;
  void PublishPromptPages(Sequence& s);

  EngineOptions options_;
  BatchOptions batch_;
  formats::ModelConfig config_;
  models::BuildOptions build_;
  std::unique_ptr<formats::WeightStore> store_;
  std::unique_ptr<vk::Context> ctx_;
  std::unique_ptr<vk::PipelineCache> pipelines_;
  codegen::TargetCaps caps_;
  int64_t coop_rows_from_ = 0;  // codegen::tuning::CoopRowsFrom(caps_).value
  // mixed_graph_: decode_graph_'s step whose rows may share sequences (graph/paging.h), for mixed steps.
  graph::Graph prefill_graph_, decode_graph_, decode_q8_graph_, mixed_graph_;
  Resources resources_;
  std::unique_ptr<vk::Buffer> prompt_ids_, prefill_token_, decode_ids_, decode_tokens_, loop_tokens_;
  size_t loop_slot_ = 0;  // bytes between loop_tokens_' slots (max_sequences ids, aligned)
  std::unique_ptr<vk::Plan> prefill_;
  graph::ValueId prefill_logits_ = -1;
  std::map<int, DecodePlan> decode_, mixed_;  // by bucket
  DecodePlan* profiled_ = nullptr;
  std::unique_ptr<PagePool> pool_;
  std::map<int, Sequence> sequences_;
  std::deque<int> queue_;  // waiting for admission, in order
  int next_id_ = 0;
  int64_t shared_tokens_ = 0;
  // The window of every attention layer, where all have the same one (else 0): their pages are a
  // ring, released as the window leaves them, and prompts are not shared.
  int64_t window_ = 0;
};

}  // namespace doppler::runtime
