// Model families: each declares its graph from a ModelConfig. The registry maps the HF
// `architectures` name to the family's builder.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/hf_config.h"
#include "graph/graph.h"

namespace doppler::models {

struct BuildOptions {
  int64_t context = 2048;                          // KV-cache capacity, in positions
  graph::DType weight_dtype = graph::DType::kF16;  // storage type of matrices and embeddings
  graph::DType kv_dtype = graph::DType::kF16;      // storage type of the KV cache
  bool logits_all_tokens = false;                  // logits for every token of a step, not only the last
  // The most tokens one step may hold (the engine's prefill chunk). Sliding-window layers size
  // their ring-buffer KV cache from it; 0 (unknown) gives them a cache of the whole context.
  int64_t max_step_tokens = 0;
  // A paged KV cache (graph/paging.h): every layer's cache is a pool of kv_pages pages; sliding
  // windows do not wrap (the host frees the pages that fall out of a window).
  graph::Paging paging;
  int64_t kv_pages = 0;
  // When set, the storage type of each matrix (and embedding) by its tensor name and row length
  // (a matrix of a stacked tensor has its expert's), given the default weight_dtype: a GGUF keeps
  // every tensor's own type (Q4_K_M mixes Q4_K and Q6_K), and --quant picks a block format per
  // matrix. Vectors (norms, biases) stay f32 regardless.
  std::function<graph::DType(const std::string& tensor, int64_t cols, graph::DType default_dtype)> dtype_of;
  // The checkpoint stores each mixture-of-experts layer's experts stacked, one tensor per matrix
  // (a GGUF's ffn_*_exps), rather than one per expert (models/blocks.h, MoeSpec).
  bool stacked_experts = false;
};

// Graph of one step of the model: input "ids" i32[T]; output "logits" (f32[T, V], or f32[1, V]
// for the last token only). How the next token is chosen is the runtime's (runtime/token_choice.h).
using GraphBuildFn = absl::StatusOr<graph::Graph> (*)(const formats::ModelConfig&, const BuildOptions&);

struct Architecture {
  const char* hf_name;  // the `architectures` value in config.json, e.g. "LlamaForCausalLM"
  GraphBuildFn build;
};

const std::vector<Architecture>& Architectures();

// Builds the step graph for config.architecture; an unknown one is an error naming the
// supported ones.
absl::StatusOr<graph::Graph> BuildModelGraph(const formats::ModelConfig& config, const BuildOptions& options);

// Family builders, registered in architecture.cc.
absl::StatusOr<graph::Graph> BuildLlama(const formats::ModelConfig& config, const BuildOptions& options);
absl::StatusOr<graph::Graph> BuildMistral(const formats::ModelConfig& config, const BuildOptions& options);
absl::StatusOr<graph::Graph> BuildQwen2(const formats::ModelConfig& config, const BuildOptions& options);
absl::StatusOr<graph::Graph> BuildQwen3(const formats::ModelConfig& config, const BuildOptions& options);
absl::StatusOr<graph::Graph> BuildPhi3(const formats::ModelConfig& config, const BuildOptions& options);
absl::StatusOr<graph::Graph> BuildGemma3(const formats::ModelConfig& config, const BuildOptions& options);
absl::StatusOr<graph::Graph> BuildQwen3Moe(const formats::ModelConfig& config, const BuildOptions& options);
absl::StatusOr<graph::Graph> BuildMixtral(const formats::ModelConfig& config, const BuildOptions& options);
absl::StatusOr<graph::Graph> BuildGptOss(const formats::ModelConfig& config, const BuildOptions& options);

}  // namespace doppler::models
