// The models and plans the kernel-level tests without a device go through: every fixture model,
// the shipped default model and three synthetic models in published shapes, each with the plans an
// engine would build for it (tests/process_replay_test.cc records their kernels for two targets;
// tests/device_class_test.cc compiles them for every device class).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/kernel.h"
#include "graph/graph.h"
#include "runtime/model_source.h"

namespace doppler::test {

struct ReplayModel {
  std::string name;  // as the process-replay golden file names it
  runtime::EngineOptions options;
};

std::vector<ReplayModel> ReplayModels();

// A model's step graph and the batched engine's decode graph (a row per sequence over a paged
// cache), or why the engine does not build the model yet (the fixtures' folder left out, so that
// the reason reads the same on every machine). Opening the model completes m.options (its prefill
// chunk) as an engine's would.
struct ModelGraphs {
  std::string not_built;  // empty where built
  graph::Graph step, batched;
};
absl::StatusOr<ModelGraphs> BuildModelGraphs(ReplayModel& m);

struct ReplayPlan {
  std::string name;  // "decode", "chunk", "prefill" or "batch_decode"
  graph::Graph graph;
  int64_t tokens;  // the plan's bucket
};

// The plans an engine builds for the model on `caps`: decode (q8 activations where the target
// multiplies integers), a short prefill chunk, prefill, and the batched engine's decode plans of 8
// rows (q8 activations, as its buckets up to 16, but where the cooperative-matrix variant for few
// rows takes them) and 32.
absl::StatusOr<std::vector<ReplayPlan>> ReplayPlans(const ReplayModel& m, const ModelGraphs& graphs,
                                                    const codegen::TargetCaps& caps);

}  // namespace doppler::test
