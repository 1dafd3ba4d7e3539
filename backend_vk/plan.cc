#include "backend_vk/plan.h"

#include <cstring>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "graph/layout.h"

namespace doppler::vk {
namespace {

using graph::OpKind;

// Values the caller provides: weights (kConcatRows ones are fused at load), states and inputs.
bool LivesOutside(OpKind k) {
  return k == OpKind::kParam || k == OpKind::kConst || k == OpKind::kState || k == OpKind::kInput ||
         k == OpKind::kConcatRows;
}

// The bytes a dispatch touches through one binding.
struct Range {
  VkBuffer buffer;
  size_t begin, end;
};

Range RangeOf(const Slice& s) {
  return {s.buffer->handle(), s.offset, s.bytes == 0 ? s.buffer->size() : s.offset + s.bytes};
}

bool Overlaps(const std::vector<Range>& ranges, const Range& r) {
  for (const Range& o : ranges) {
    if (o.buffer == r.buffer && o.begin < r.end && r.begin < o.end) return true;
  }
  return false;
}

}  // namespace

codegen::TargetCaps TargetCapsOf(const DeviceInfo& info) {
  codegen::TargetCaps caps;
  caps.subgroup_size = info.subgroup_size;
  caps.max_shared_memory = info.max_shared_memory;
  caps.max_workgroup_invocations = info.max_workgroup_invocations;
  return caps;
}

absl::StatusOr<std::unique_ptr<Plan>> Plan::Build(Context& ctx, PipelineCache& pipelines, const graph::Graph& g,
                                                  int64_t tokens, const codegen::TargetCaps& caps,
                                                  const std::map<graph::ValueId, Buffer*>& external,
                                                  const std::string& name) {
  std::unique_ptr<Plan> plan(new Plan(ctx));
  plan->name_ = name;
  plan->tokens_ = tokens;
  plan->slices_.assign(static_cast<size_t>(g.size()), Slice{});

  // Buffers: external ones, aliases and views, then the plan's own activations.
  for (const graph::Node& n : g.nodes()) {
    const size_t id = static_cast<size_t>(n.id);
    if (auto it = external.find(n.id); it != external.end()) {
      plan->slices_[id] = Slice{it->second, 0, 0};
      continue;
    }
    if (LivesOutside(n.kind)) {
      return absl::InvalidArgumentError(absl::StrCat("plan ", name, ": no buffer given for ", graph::OpName(n.kind),
                                                     " '", n.attrs.Str("name"), "'"));
    }
    if (graph::GetOpDef(n.kind).updates_input0) {
      plan->slices_[id] = plan->slices_[static_cast<size_t>(n.inputs[0])];
      continue;
    }
    if (n.kind == OpKind::kPart) {
      const graph::Node& parent = g.node(n.inputs[0]);
      const graph::PartRange r = graph::SplitLayout(graph::SplitWidths(parent), parent.type.shape[0].Resolve(tokens),
                                                    parent.type.dtype)[static_cast<size_t>(n.attrs.Int("index"))];
      const Slice& p = plan->slices_[static_cast<size_t>(parent.id)];
      plan->slices_[id] = Slice{p.buffer, p.offset + r.offset, r.bytes};
      continue;
    }
    const size_t bytes = std::max<size_t>(16, graph::ValueBytes(n, tokens));
    absl::StatusOr<std::unique_ptr<Buffer>> b =
        ctx.CreateBuffer(bytes, BufferKind::kDeviceLocal, absl::StrCat(name, ".", n.label));
    if (!b.ok()) return b.status();
    plan->stats_.activation_bytes += bytes;
    plan->slices_[id] = Slice{b->get(), 0, bytes};
    plan->owned_.push_back(*std::move(b));
  }
  absl::StatusOr<std::unique_ptr<Buffer>> step =
      ctx.CreateBuffer(sizeof(codegen::StepParams), BufferKind::kHostVisible, absl::StrCat(name, ".step"));
  if (!step.ok()) return step.status();
  plan->step_params_ = *std::move(step);

  // Kernels, pipelines and descriptor sets, once.
  absl::StatusOr<std::unique_ptr<DescriptorAllocator>> descriptors = ctx.CreateDescriptorAllocator();
  if (!descriptors.ok()) return descriptors.status();
  plan->descriptors_ = *std::move(descriptors);
  std::vector<codegen::Kernel> kernels;
  std::vector<const ComputePipeline*> pipes;
  std::vector<VkDescriptorSet> sets;
  for (const graph::Node& n : g.nodes()) {
    if (LivesOutside(n.kind) || n.kind == OpKind::kPart) continue;  // no kernel
    absl::StatusOr<codegen::Kernel> k = codegen::EmitKernel(g, n, caps, tokens);
    if (!k.ok()) return k.status();
    absl::StatusOr<const ComputePipeline*> p = pipelines.Get(k->glsl, absl::StrCat(k->family, ".", k->variant));
    if (!p.ok()) return p.status();
    std::vector<BufferBinding> bindings = {{0, plan->step_params_.get()}};
    for (size_t i = 0; i < k->args.size(); ++i) {
      const Slice& s = plan->slices_[static_cast<size_t>(k->args[i].value)];
      bindings.push_back({static_cast<uint32_t>(i + 1), s.buffer, s.offset, s.bytes == 0 ? VK_WHOLE_SIZE : s.bytes});
    }
    absl::StatusOr<VkDescriptorSet> set = plan->descriptors_->Allocate(**p, bindings, n.label);
    if (!set.ok()) return set.status();
    kernels.push_back(*std::move(k));
    pipes.push_back(*p);
    sets.push_back(*set);
    plan->dispatches_.push_back({n.id, kernels.back().family, kernels.back().variant, kernels.back().groups, false});
  }
  if (absl::Status s = plan->Record(kernels, pipes, sets); !s.ok()) return s;
  return plan;
}

// Records every dispatch in graph order with a barrier only where a dispatch reads or writes bytes
// that an earlier dispatch since the last barrier wrote (read-after-write, write-after-write), or
// writes bytes read since then (write-after-read).
absl::Status Plan::Record(const std::vector<codegen::Kernel>& kernels,
                          const std::vector<const ComputePipeline*>& pipelines,
                          const std::vector<VkDescriptorSet>& sets) {
  absl::StatusOr<std::unique_ptr<CommandBuffer>> cmd = ctx_.CreateCommandBuffer(name_);
  if (!cmd.ok()) return cmd.status();
  cmd_ = *std::move(cmd);
  if (absl::Status s = cmd_->Begin(); !s.ok()) return s;
  std::vector<Range> written, read;
  for (size_t i = 0; i < kernels.size(); ++i) {
    bool hazard = false;
    for (const codegen::KernelArg& a : kernels[i].args) {
      const Range r = RangeOf(slices_[static_cast<size_t>(a.value)]);
      hazard |= Overlaps(written, r) || (a.written && Overlaps(read, r));
    }
    if (hazard) {
      cmd_->ComputeBarrier();
      written.clear();
      read.clear();
      ++stats_.barriers;
    }
    dispatches_[i].barrier_before = hazard;
    for (const codegen::KernelArg& a : kernels[i].args) {
      (a.written ? written : read).push_back(RangeOf(slices_[static_cast<size_t>(a.value)]));
    }
    cmd_->BindPipeline(*pipelines[i]);
    cmd_->BindDescriptorSet(sets[i]);
    cmd_->Dispatch(kernels[i].groups[0], kernels[i].groups[1], kernels[i].groups[2]);
    ++stats_.dispatches;
  }
  ++record_count_;
  return cmd_->End();
}

absl::Status Plan::Run(uint32_t n_tokens, uint32_t pos) {
  if (n_tokens == 0 || n_tokens > tokens_) {
    return absl::InvalidArgumentError(absl::StrCat("plan ", name_, ": ", n_tokens, " tokens for a plan of ", tokens_));
  }
  const codegen::StepParams params{n_tokens, pos};
  std::memcpy(step_params_->mapped(), &params, sizeof(params));
  return ctx_.Submit(*cmd_);
}

}  // namespace doppler::vk
