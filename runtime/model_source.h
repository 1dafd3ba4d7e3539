// Opening a model (an HF directory or a GGUF file) and building its step graph: what the engine
// compiles, and what `doppler graph` shows without a GPU.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "formats/hf_config.h"
#include "formats/weight_store.h"
#include "graph/graph.h"
#include "models/architecture.h"
#include "runtime/engine.h"

namespace doppler::runtime {

struct OpenedModel {
  formats::ModelConfig config;
  std::unique_ptr<formats::WeightStore> store;
  models::BuildOptions build;  // context, step size, each matrix's storage type, the KV cache type
};

// Opens options.model_path and resolves the build options; fills options.context when it is 0
// (the model's own, at most 4096) and clamps options.prefill_chunk to it.
absl::StatusOr<OpenedModel> OpenModel(EngineOptions& options);

// The model's step graph, then how the next token is chosen, then the pass pipeline.
absl::StatusOr<graph::Graph> StepGraph(const formats::ModelConfig& config, const models::BuildOptions& build,
                                       const SamplingOptions& sampling, const std::string& pipeline);

}  // namespace doppler::runtime
