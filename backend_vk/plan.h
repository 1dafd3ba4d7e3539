// A plan is one step of a graph (for a token bucket) compiled for the device: a buffer for every
// value, a pipeline and a descriptor set for every compute node, and one command buffer recorded
// once at build time. Run() writes the step parameters (token count, position) into a small
// host-visible block and replays that command buffer: nothing is re-recorded per step.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backend_vk/context.h"
#include "backend_vk/pipeline_cache.h"
#include "backend_vk/schedule.h"
#include "codegen/kernel.h"
#include "codegen/lowering.h"
#include "graph/graph.h"

namespace doppler::vk {

// What the code generator needs to know of a device.
codegen::TargetCaps TargetCapsOf(const DeviceInfo& info);

// Where a value lives: a range of a buffer (a part of a split value is a range of its parent's).
struct Slice {
  Buffer* buffer = nullptr;
  size_t offset = 0;
  size_t bytes = 0;  // 0: to the end of the buffer
};

// What the scheduler recorded for one compute node.
struct PlannedDispatch {
  graph::ValueId node;
  std::string family, variant;
  std::array<uint32_t, 3> groups;
  bool barrier_before;  // a barrier precedes it: it reads or overwrites what an earlier dispatch wrote
  int level = 0;        // its barrier level: the dispatches between two barriers run concurrently
  std::vector<codegen::KernelArg> args;  // the values it binds (bindings 1..n), for byte counts in profiles
};

// A value bound to a different range in each step of a multi-step plan: step s binds bytes
// [offset + s * stride, + bytes) of `buffer`, the offset taken modulo `wrap` where that is not 0 (a
// ring of slots; e.g. step s reads its token id from slot s and writes the next one to slot s + 1).
struct SteppedBinding {
  graph::ValueId value;
  Buffer* buffer = nullptr;
  size_t offset = 0, stride = 0, bytes = 0, wrap = 0;
};

struct PlanStats {
  int dispatches = 0;
  int barriers = 0;
  int levels = 0;  // barrier levels of one step
  uint64_t activation_bytes = 0;  // bytes of the plan's activation arena
};

// A profiled step (Plan::RunProfiled).
struct ProfiledStep {
  // Each dispatch's nanoseconds (dispatches() order): its level's time between the timestamps
  // around it, shared evenly by the level's dispatches.
  std::vector<double> dispatch_ns;
  // The same step with timestamps only at its start and end: what the step takes without the
  // cost of a timestamp after each level.
  double bare_ns = 0;
};

class Plan {
 public:
  // `external` gives the buffers of values that live outside the plan: every param, const,
  // concat_rows (weights fused at load) and state, and the inputs and outputs the caller shares
  // between plans. The output of an op that updates a state in place (cache_write, record_tokens)
  // is that state's buffer; a part is a range of its split parent. Every other value is its range
  // of the plan's one device-local arena, laid out by the memory planner (passes/memory_plan.h):
  // `arena` gives the arena's size and every such value's offset.
  //
  // `dispatches` are the step's kernels as codegen::Lower made them for `tokens`, which the memory
  // plan was laid out from.
  //
  // With `steps` > 1 the command buffer holds that many steps back to back (e.g. decode steps, each
  // feeding the token the one before chose), each with its own step parameters and with the
  // values in `stepped` bound per step; barriers between steps are placed like any others.
  static absl::StatusOr<std::unique_ptr<Plan>> Build(Context& ctx, PipelineCache& pipelines, const graph::Graph& g,
                                                     int64_t tokens, std::vector<codegen::Dispatch> dispatches,
                                                     const std::map<graph::ValueId, Buffer*>& external,
                                                     const ArenaLayout& arena, const std::string& name,
                                                     int steps = 1, const std::vector<SteppedBinding>& stepped = {});

  // Runs the plan's steps, each of n_tokens (<= the bucket) tokens, in one submit: step s at
  // absolute positions pos + s * n_tokens, ... (words 0 and 1 of each step's block; the rest of a
  // paged graph's block is the host's, through step_block).
  absl::Status Run(uint32_t n_tokens, uint32_t pos);
  // Run in two halves (Context::Start, Context::Finish): the host may queue another plan between
  // them. The step parameters are the plan's own, so a plan is not started again before Finish.
  absl::Status Start(uint32_t n_tokens, uint32_t pos);
  absl::Status Finish();
  bool pending() const { return cmd_ != nullptr && cmd_->pending(); }

  // Runs the same step twice from two more recordings, used only when profiling: the same
  // dispatches and barriers in the same order, first with a GPU timestamp at its start and end
  // only, then with one after each level (the dispatches between two barriers, which run
  // concurrently). The recordings are made on first use. Needs DeviceInfo::timestamps.
  absl::StatusOr<ProfiledStep> RunProfiled(uint32_t n_tokens, uint32_t pos);

  // With a paged graph: step `step`'s block (codegen/step_rows.h), mapped, for the host to
  // write the rows' positions and page tables into before Run/Start (null past steps()).
  uint32_t* step_block(int step = 0);

  const Slice& slice(graph::ValueId id) const { return slices_[static_cast<size_t>(id)]; }
  int64_t tokens() const { return tokens_; }
  int steps() const { return steps_; }
  // The dispatches of one step (a multi-step plan records them steps() times).
  const std::vector<PlannedDispatch>& dispatches() const { return dispatches_; }
  // The pipeline dispatch i (dispatches() order) runs.
  const ComputePipeline& pipeline(size_t i) const { return *pipelines_[i]; }
  const PlanStats& stats() const { return stats_; }
  int record_count() const { return record_count_; }

 private:
  Plan(Context& ctx) : ctx_(ctx) {}
  // sets[s][i]: dispatch i of step s; barriers: for every dispatch of every step, in order.
  absl::Status Record(const std::vector<codegen::Kernel>& kernels,
                      const std::vector<const ComputePipeline*>& pipelines,
                      const std::vector<std::vector<VkDescriptorSet>>& sets, const std::vector<bool>& barriers);
  absl::Status WriteStepParams(uint32_t n_tokens, uint32_t pos);

  Context& ctx_;
  std::string name_;
  int64_t tokens_ = 0;
  int steps_ = 1;
  size_t params_bytes_ = 0;   // bytes of a step's block (codegen/step_rows.h)
  size_t params_stride_ = 0;  // bytes between the steps' blocks
  std::vector<Slice> slices_;                     // by value id
  std::unique_ptr<Buffer> arena_;                 // activations
  std::vector<std::unique_ptr<Buffer>> scratch_;  // kernels' own (codegen::Kernel::scratch_bytes)
  std::unique_ptr<Buffer> params_;                // kernels' (codegen::Kernel::params), if any has some
  std::unique_ptr<Buffer> step_params_;
  std::unique_ptr<DescriptorAllocator> descriptors_;
  std::unique_ptr<CommandBuffer> cmd_;
  std::vector<PlannedDispatch> dispatches_;
  // Kept to record the profiling command buffer.
  std::vector<const ComputePipeline*> pipelines_;
  std::vector<VkDescriptorSet> sets_;  // the first step's
  // The profiling recordings and their timestamps: [0] at the step's ends, [1] after each level.
  std::unique_ptr<CommandBuffer> profile_cmd_[2];
  std::unique_ptr<TimestampPool> timestamps_[2];
  PlanStats stats_;
  int record_count_ = 0;
};

}  // namespace doppler::vk
