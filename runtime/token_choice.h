// How the next token is chosen from a model's logits: greedy (argmax) or sampled. The model
// graph ends at "logits"; the engine appends the choice, so models know nothing of sampling.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace doppler::runtime {

struct SamplingOptions {
  double temperature = 0.0;     // 0: greedy
  int64_t top_k = 0;            // 0: off
  double top_p = 1.0;           // 1: off
  double min_p = 0.0;           // 0: off
  double repeat_penalty = 1.0;  // 1: off
  int64_t repeat_last_n = 64;   // tokens the penalty looks back over
  uint32_t seed = 0;
};

// Appends to `g` the nodes that turn its "logits" output (the last row of it) into the
// "next_token" output: argmax, or repeat penalty (over the "ids" input's recent tokens, kept in a
// state "sampling.history") then temperature / top-k / top-p / min-p sampling. A graph with a row
// per sequence (graph/paging.h) gets every row's argmax.
absl::StatusOr<graph::Graph> AppendTokenChoice(graph::Graph g, const SamplingOptions& options);

}  // namespace doppler::runtime
