// Compiling a step graph into a vk::Plan over a model's shared resources: what every engine does
// for each of its plans.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backend_vk/context.h"
#include "backend_vk/pipeline_cache.h"
#include "backend_vk/plan.h"
#include "codegen/kernel.h"
#include "codegen/lowering.h"
#include "graph/graph.h"
#include "passes/memory_plan.h"
#include "runtime/resources.h"

namespace doppler::runtime {

struct PlanTarget {
  vk::Context& ctx;
  vk::PipelineCache& pipelines;
  const codegen::TargetCaps& caps;
  const Resources& resources;  // params, consts and states, by name
  bool progress = false;       // "compiling the NAME plan..." on stderr
  bool verbose = false;        // every dispatch's kernel variant on stderr
};

// A step lowered for a target: its dispatches (codegen::Lower), and the arena layout of its
// activations planned from them (passes::PlanMemory), every value in `outside` excepted.
struct LoweredStep {
  std::vector<codegen::Dispatch> dispatches;
  passes::MemoryPlan memory;
};
// The values each dispatch binds, for the memory planner.
std::vector<std::vector<passes::Binding>> BindingsOf(const std::vector<codegen::Dispatch>& dispatches);
absl::StatusOr<LoweredStep> LowerStep(const graph::Graph& g, const codegen::TargetCaps& caps, int64_t tokens,
                                      const std::set<graph::ValueId>& outside);

// With `verbose`, the device's class and the choices codegen/tuning/ made for it on stderr
// (codegen/tuning/device_choices.h): what every engine prints before its plans.
absl::Status PrintDeviceChoices(const codegen::TargetCaps& caps, bool verbose);

// A plan of `g` for steps of up to `tokens` tokens: its params, consts and states from the
// resources, the values in `external` (inputs, chosen tokens) where given, every other value in
// the plan's own arena, laid out by liveness (passes::PlanMemory).
absl::StatusOr<std::unique_ptr<vk::Plan>> CompilePlan(const PlanTarget& target, const graph::Graph& g, int64_t tokens,
                                                      const std::map<graph::ValueId, vk::Buffer*>& external,
                                                      const std::string& name, int steps = 1,
                                                      const std::vector<vk::SteppedBinding>& stepped = {});

}  // namespace doppler::runtime
