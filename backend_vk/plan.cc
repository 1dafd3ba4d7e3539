#include "backend_vk/plan.h"

#include <algorithm>
#include <cstring>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/step_rows.h"
#include "graph/layout.h"

namespace doppler::vk {

codegen::TargetCaps TargetCapsOf(const DeviceInfo& info) {
  codegen::TargetCaps caps;
  caps.device_class = info.device_class;
  caps.subgroup_size = info.subgroup_size;
  caps.min_subgroup_size = info.min_subgroup_size;
  caps.max_shared_memory = info.max_shared_memory;
  caps.max_workgroup_invocations = info.max_workgroup_invocations;
  caps.subgroup_arithmetic = info.subgroup_arithmetic;
  caps.subgroup_shuffle = info.subgroup_shuffle;
  caps.coop_matrix_nv = info.coop_matrix_nv && absl::c_linear_search(info.coop_nv_f16_shapes, "16x16x16") &&
                        info.fp16 && info.memory_model && info.subgroup_arithmetic && info.subgroup_shuffle &&
                        info.subgroup_size == 32 && info.min_subgroup_size == 32;
  caps.coop_matrix_nv_16x8 = caps.coop_matrix_nv && absl::c_linear_search(info.coop_nv_f16_shapes, "16x8x16");
  caps.coop_fragments_mma = caps.coop_matrix_nv && info.coop_fragments_mma;
  caps.coop_accumulators_mma = caps.coop_matrix_nv && info.coop_accumulators_mma;
  caps.integer_dot_product = info.int_dot_product;
  caps.float16_arithmetic = info.fp16;
  caps.storage_16bit = info.storage16;
  return caps;
}

absl::StatusOr<std::unique_ptr<Plan>> Plan::Build(Context& ctx, PipelineCache& pipelines, const graph::Graph& g,
                                                  int64_t tokens, std::vector<codegen::Dispatch> dispatches,
                                                  const std::map<graph::ValueId, Buffer*>& external,
                                                  const ArenaLayout& arena, const std::string& name, int steps,
                                                  const std::vector<SteppedBinding>& stepped) {
  if (steps < 1) return absl::InvalidArgumentError(absl::StrCat("plan ", name, ": ", steps, " steps"));
  std::unique_ptr<Plan> plan(new Plan(ctx));
  plan->name_ = name;
  plan->tokens_ = tokens;
  plan->steps_ = steps;

  // Where every value lives: the caller's buffers (told apart by id), aliases and views, the arena.
  std::map<Buffer*, uint64_t> buffer_ids;
  std::map<uint64_t, Buffer*> buffers;
  std::map<graph::ValueId, uint64_t> external_ids;
  for (const auto& [id, buffer] : external) {
    auto [it, added] = buffer_ids.emplace(buffer, buffer_ids.size() + 1);
    buffers[it->second] = buffer;
    external_ids[id] = it->second;
  }
  absl::StatusOr<std::vector<ValueLocation>> locations = LocateValues(g, tokens, arena, external_ids);
  if (!locations.ok()) return absl::Status(locations.status().code(), absl::StrCat("plan ", name, ": ", locations.status().message()));
  if (arena.bytes > 0) {
    absl::StatusOr<std::unique_ptr<Buffer>> b =
        ctx.CreateBuffer(std::max<size_t>(16, arena.bytes), BufferKind::kDeviceLocal, absl::StrCat(name, ".arena"));
    if (!b.ok()) return b.status();
    plan->arena_ = *std::move(b);
    buffers[kArenaBuffer] = plan->arena_.get();
  }
  plan->stats_.activation_bytes = arena.bytes;
  plan->slices_.reserve(locations->size());
  for (const ValueLocation& l : *locations) {
    plan->slices_.push_back(Slice{buffers[l.buffer], l.offset, l.bytes == kToTheEnd ? 0 : l.bytes});
  }
  // Each step's block (its parameters, and with paging its rows' positions and page tables) at an
  // offset a descriptor may start at.
  const size_t align = std::max<size_t>(4, ctx.info().min_storage_buffer_offset_alignment);
  plan->params_bytes_ = codegen::StepBlockLayoutOf(g.paging(), tokens).words * sizeof(uint32_t);
  plan->params_stride_ = (plan->params_bytes_ + align - 1) / align * align;
  absl::StatusOr<std::unique_ptr<Buffer>> step = ctx.CreateBuffer(
      plan->params_stride_ * static_cast<size_t>(steps), BufferKind::kMappedDevice, absl::StrCat(name, ".step"));
  if (!step.ok()) return step.status();
  plan->step_params_ = *std::move(step);
  // Each step's locations and slices: the plan's, but for the stepped values.
  std::vector<std::vector<ValueLocation>> step_locations(static_cast<size_t>(steps), *locations);
  std::vector<std::vector<Slice>> step_slices(static_cast<size_t>(steps), plan->slices_);
  for (const SteppedBinding& b : stepped) {
    auto [it, added] = buffer_ids.emplace(b.buffer, buffer_ids.size() + 1);
    for (int st = 0; st < steps; ++st) {
      const size_t unwrapped = b.offset + static_cast<size_t>(st) * b.stride;
      const size_t offset = b.wrap > 0 ? unwrapped % b.wrap : unwrapped;
      step_locations[static_cast<size_t>(st)][static_cast<size_t>(b.value)] = ValueLocation{it->second, offset, b.bytes};
      step_slices[static_cast<size_t>(st)][static_cast<size_t>(b.value)] = Slice{b.buffer, offset, b.bytes};
    }
  }

  // Kernels, pipelines and descriptor sets, once.
  absl::StatusOr<std::unique_ptr<DescriptorAllocator>> descriptors = ctx.CreateDescriptorAllocator();
  if (!descriptors.ok()) return descriptors.status();
  plan->descriptors_ = *std::move(descriptors);
  std::vector<codegen::Kernel> kernels;
  std::vector<const ComputePipeline*> pipes;
  for (codegen::Dispatch& d : dispatches) {
    codegen::Kernel& k = d.kernel;
    absl::StatusOr<const ComputePipeline*> p = pipelines.Get(k.glsl, absl::StrCat(k.family, ".", k.variant));
    if (!p.ok()) return p.status();
    kernels.push_back(std::move(k));
    pipes.push_back(*p);
    plan->dispatches_.push_back(
        {d.node, kernels.back().family, kernels.back().variant, kernels.back().groups, false, 0, kernels.back().args});
  }
  // Kernels' scratch, zeroed, one buffer for each dispatch that has some (shared by the steps of a
  // plan, whose dispatches of a kernel are levels apart).
  std::vector<Buffer*> scratch(kernels.size(), nullptr);
  for (size_t d = 0; d < kernels.size(); ++d) {
    if (kernels[d].scratch_bytes == 0) continue;
    absl::StatusOr<std::unique_ptr<Buffer>> b =
        ctx.CreateBuffer(static_cast<size_t>(kernels[d].scratch_bytes), BufferKind::kDeviceLocal,
                         absl::StrCat(name, ".scratch.", g.node(plan->dispatches_[d].node).label));
    if (!b.ok()) return b.status();
    if (absl::Status s = ctx.Fill(**b, 0); !s.ok()) return s;
    scratch[d] = b->get();
    plan->scratch_.push_back(*std::move(b));
  }
  // Kernels' params, in one buffer at offsets a storage descriptor may start at (shared by the
  // steps of a plan: they never change).
  const size_t params_align = std::max<size_t>(16, ctx.info().min_storage_buffer_offset_alignment);
  std::vector<size_t> params_at(kernels.size(), 0);
  std::vector<uint8_t> params_bytes;
  for (size_t d = 0; d < kernels.size(); ++d) {
    if (kernels[d].params.empty()) continue;
    params_at[d] = (params_bytes.size() + params_align - 1) / params_align * params_align;
    params_bytes.resize(params_at[d] + kernels[d].params.size() * sizeof(uint32_t));
    std::memcpy(params_bytes.data() + params_at[d], kernels[d].params.data(), kernels[d].params.size() * sizeof(uint32_t));
  }
  if (!params_bytes.empty()) {
    absl::StatusOr<std::unique_ptr<Buffer>> b =
        ctx.CreateBuffer(params_bytes.size(), BufferKind::kDeviceLocal, absl::StrCat(name, ".params"));
    if (!b.ok()) return b.status();
    if (absl::Status s = ctx.Upload(**b, 0, params_bytes.data(), params_bytes.size()); !s.ok()) return s;
    plan->params_ = *std::move(b);
  }
  // Descriptor sets and accesses of every step.
  std::vector<std::vector<VkDescriptorSet>> sets(static_cast<size_t>(steps));
  std::vector<DispatchAccess> accesses;
  for (size_t st = 0; st < sets.size(); ++st) {
    for (size_t d = 0; d < kernels.size(); ++d) {
      const codegen::Kernel& k = kernels[d];
      std::vector<BufferBinding> bindings = {
          {0, plan->step_params_.get(), st * plan->params_stride_, plan->params_bytes_}};
      for (size_t i = 0; i < k.args.size(); ++i) {
        const Slice& s = step_slices[st][static_cast<size_t>(k.args[i].value)];
        bindings.push_back({static_cast<uint32_t>(i + 1), s.buffer, s.offset, s.bytes == 0 ? VK_WHOLE_SIZE : s.bytes});
      }
      if (scratch[d] != nullptr) {
        bindings.push_back({static_cast<uint32_t>(k.args.size() + 1), scratch[d], 0, static_cast<size_t>(k.scratch_bytes)});
      }
      if (!k.params.empty()) {
        bindings.push_back({codegen::ParamsBinding(k.args.size(), scratch[d] != nullptr), plan->params_.get(), params_at[d],
                            k.params.size() * sizeof(uint32_t)});
      }
      absl::StatusOr<VkDescriptorSet> set =
          plan->descriptors_->Allocate(*pipes[d], bindings, g.node(plan->dispatches_[d].node).label);
      if (!set.ok()) return set.status();
      sets[st].push_back(*set);
      accesses.push_back(AccessOf(k, step_locations[st]));
    }
  }
  plan->pipelines_ = pipes;
  plan->sets_ = sets[0];
  if (absl::Status s = plan->Record(kernels, pipes, sets, PlaceBarriers(accesses)); !s.ok()) return s;
  return plan;
}

// Records every dispatch in graph order, with a barrier before those PlaceBarriers chose: only
// where a dispatch reads or writes bytes that an earlier dispatch since the last barrier wrote
// (read-after-write, write-after-write), or writes bytes read since then (write-after-read).
absl::Status Plan::Record(const std::vector<codegen::Kernel>& kernels,
                          const std::vector<const ComputePipeline*>& pipelines,
                          const std::vector<std::vector<VkDescriptorSet>>& sets, const std::vector<bool>& barriers) {
  absl::StatusOr<std::unique_ptr<CommandBuffer>> cmd = ctx_.CreateCommandBuffer(name_);
  if (!cmd.ok()) return cmd.status();
  cmd_ = *std::move(cmd);
  if (absl::Status s = cmd_->Begin(); !s.ok()) return s;
  for (size_t st = 0; st < sets.size(); ++st) {
    for (size_t i = 0; i < kernels.size(); ++i) {
      const bool barrier = barriers[st * kernels.size() + i];
      if (barrier) {
        cmd_->ComputeBarrier();
        ++stats_.barriers;
      }
      if (st == 0) {
        dispatches_[i].barrier_before = barrier;
        if (i > 0 && barrier) ++stats_.levels;
        dispatches_[i].level = stats_.levels;
      }
      cmd_->BindPipeline(*pipelines[i]);
      cmd_->BindDescriptorSet(sets[st][i]);
      cmd_->Dispatch(kernels[i].groups[0], kernels[i].groups[1], kernels[i].groups[2]);
      ++stats_.dispatches;
    }
  }
  if (!kernels.empty()) ++stats_.levels;
  ++record_count_;
  return cmd_->End();
}

absl::Status Plan::WriteStepParams(uint32_t n_tokens, uint32_t pos) {
  if (n_tokens == 0 || n_tokens > tokens_) {
    return absl::InvalidArgumentError(absl::StrCat("plan ", name_, ": ", n_tokens, " tokens for a plan of ", tokens_));
  }
  for (int st = 0; st < steps_; ++st) {
    const codegen::StepParams params{n_tokens, pos + static_cast<uint32_t>(st) * n_tokens};
    std::memcpy(static_cast<char*>(step_params_->mapped()) + static_cast<size_t>(st) * params_stride_, &params,
                sizeof(params));
  }
  return absl::OkStatus();
}

uint32_t* Plan::step_block(int step) {
  if (step < 0 || step >= steps_) return nullptr;
  return reinterpret_cast<uint32_t*>(static_cast<char*>(step_params_->mapped()) + static_cast<size_t>(step) * params_stride_);
}

absl::Status Plan::Run(uint32_t n_tokens, uint32_t pos) {
  if (absl::Status s = Start(n_tokens, pos); !s.ok()) return s;
  return Finish();
}

absl::Status Plan::Start(uint32_t n_tokens, uint32_t pos) {
  if (pending()) return absl::FailedPreconditionError(absl::StrCat("plan ", name_, " started again before it finished"));
  if (absl::Status s = WriteStepParams(n_tokens, pos); !s.ok()) return s;
  return ctx_.Start(*cmd_);
}

absl::Status Plan::Finish() { return ctx_.Finish(*cmd_); }

absl::StatusOr<ProfiledStep> Plan::RunProfiled(uint32_t n_tokens, uint32_t pos) {
  if (steps_ != 1) return absl::FailedPreconditionError(absl::StrCat("plan ", name_, ": profiling a plan of several steps"));
  const uint32_t n = static_cast<uint32_t>(dispatches_.size());
  const uint32_t levels = static_cast<uint32_t>(stats_.levels);
  for (int timed_levels = 0; timed_levels < 2; ++timed_levels) {
    if (profile_cmd_[timed_levels]) continue;
    // The plan's own command stream with timestamps: the barriers are the plan's, so the step runs
    // as it does unprofiled but for the timestamps' own cost (a timestamp waits for the level, as
    // the barrier after it does anyway, yet each adds about a microsecond on the H100).
    absl::StatusOr<std::unique_ptr<TimestampPool>> pool = ctx_.CreateTimestampPool(timed_levels ? levels + 1 : 2);
    if (!pool.ok()) return pool.status();
    absl::StatusOr<std::unique_ptr<CommandBuffer>> cmd =
        ctx_.CreateCommandBuffer(absl::StrCat(name_, timed_levels ? ".profile" : ".profile_ends"));
    if (!cmd.ok()) return cmd.status();
    CommandBuffer& c = **cmd;
    if (absl::Status s = c.Begin(); !s.ok()) return s;
    c.ResetTimestamps(**pool);
    c.WriteTimestamp(**pool, 0);
    for (uint32_t i = 0; i < n; ++i) {
      if (i > 0 && dispatches_[i].barrier_before) c.ComputeBarrier();
      c.BindPipeline(*pipelines_[i]);
      c.BindDescriptorSet(sets_[i]);
      c.Dispatch(dispatches_[i].groups[0], dispatches_[i].groups[1], dispatches_[i].groups[2]);
      const bool level_ends = i + 1 == n || dispatches_[i + 1].barrier_before;
      if (level_ends && (timed_levels || i + 1 == n)) c.WriteTimestamp(**pool, timed_levels ? dispatches_[i].level + 1 : 1);
    }
    if (absl::Status s = c.End(); !s.ok()) return s;
    timestamps_[timed_levels] = *std::move(pool);
    profile_cmd_[timed_levels] = *std::move(cmd);
  }
  if (absl::Status s = WriteStepParams(n_tokens, pos); !s.ok()) return s;
  // The step timed at its ends, then with a timestamp after each level.
  std::vector<double> ns[2];
  for (int timed_levels = 0; timed_levels < 2; ++timed_levels) {
    if (absl::Status s = ctx_.Submit(*profile_cmd_[timed_levels]); !s.ok()) return s;
    absl::StatusOr<std::vector<double>> read = ctx_.ReadTimestamps(*timestamps_[timed_levels]);
    if (!read.ok()) return read.status();
    ns[timed_levels] = *std::move(read);
  }
  ProfiledStep out;
  out.bare_ns = std::max(0.0, ns[0][1] - ns[0][0]);
  // A level's time, shared evenly by its dispatches.
  std::vector<uint32_t> level_size(levels, 0);
  for (uint32_t i = 0; i < n; ++i) ++level_size[dispatches_[i].level];
  out.dispatch_ns.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t l = dispatches_[i].level;
    out.dispatch_ns[i] = std::max(0.0, ns[1][l + 1] - ns[1][l]) / level_size[l];
  }
  return out;
}

}  // namespace doppler::vk
