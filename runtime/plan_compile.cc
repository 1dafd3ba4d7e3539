#include "runtime/plan_compile.h"

#include <cstdio>
#include <set>

#include "codegen/tuning/device_choices.h"

namespace doppler::runtime {

std::vector<std::vector<passes::Binding>> BindingsOf(const std::vector<codegen::Dispatch>& dispatches) {
  std::vector<std::vector<passes::Binding>> bindings;
  bindings.reserve(dispatches.size());
  for (const codegen::Dispatch& d : dispatches) {
    std::vector<passes::Binding>& b = bindings.emplace_back();
    for (const codegen::KernelArg& a : d.kernel.args) b.push_back({a.value, a.written});
  }
  return bindings;
}

absl::StatusOr<LoweredStep> LowerStep(const graph::Graph& g, const codegen::TargetCaps& caps, int64_t tokens,
                                      const std::set<graph::ValueId>& outside) {
  absl::StatusOr<std::vector<codegen::Dispatch>> dispatches = codegen::Lower(g, caps, tokens);
  if (!dispatches.ok()) return dispatches.status();
  absl::StatusOr<passes::MemoryPlan> memory = passes::PlanMemory(g, BindingsOf(*dispatches), tokens, outside);
  if (!memory.ok()) return memory.status();
  return LoweredStep{*std::move(dispatches), *std::move(memory)};
}

absl::Status PrintDeviceChoices(const codegen::TargetCaps& caps, bool verbose) {
  if (!verbose) return absl::OkStatus();
  absl::StatusOr<std::string> choices = codegen::tuning::DescribeDeviceChoices(caps);
  if (!choices.ok()) return choices.status();
  std::fprintf(stderr, "%s", choices->c_str());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<vk::Plan>> CompilePlan(const PlanTarget& target, const graph::Graph& g, int64_t tokens,
                                                      const std::map<graph::ValueId, vk::Buffer*>& external,
                                                      const std::string& name, int steps,
                                                      const std::vector<vk::SteppedBinding>& stepped) {
  std::map<graph::ValueId, vk::Buffer*> bound = BindResources(g, target.resources);
  for (const auto& [id, buffer] : external) bound[id] = buffer;
  // The plan's own activations share one arena, laid out by liveness.
  std::set<graph::ValueId> outside;
  for (const auto& [id, buffer] : bound) outside.insert(id);
  absl::StatusOr<LoweredStep> step = LowerStep(g, target.caps, tokens, outside);
  if (!step.ok()) return step.status();
  // Kernels compile on first use (a few seconds on a first start; later starts hit the SPIR-V cache).
  if (target.progress) {
    std::fprintf(stderr, "compiling the %s plan (T=%lld)...", name.c_str(), static_cast<long long>(tokens));
  }
  absl::StatusOr<std::unique_ptr<vk::Plan>> plan =
      vk::Plan::Build(target.ctx, target.pipelines, g, tokens, std::move(step->dispatches), bound,
                      vk::ArenaLayout{step->memory.arena_bytes, step->memory.offset}, name, steps, stepped);
  if (target.progress) std::fprintf(stderr, " %s\n", plan.ok() ? "done" : "failed");
  if (!plan.ok()) return plan.status();
  if (target.verbose) {
    std::fprintf(stderr, "plan %s (T=%lld): %d dispatches, %d barriers\n", name.c_str(),
                 static_cast<long long>(tokens), (*plan)->stats().dispatches, (*plan)->stats().barriers);
    for (const vk::PlannedDispatch& d : (*plan)->dispatches()) {
      std::fprintf(stderr, "  %-48s %s.%s\n", g.node(d.node).label.c_str(), d.family.c_str(), d.variant.c_str());
    }
  }
  return plan;
}

}  // namespace doppler::runtime
