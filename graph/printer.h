// Human-readable text form of a graph: one node per line.
#pragma once

#include <string>

#include "graph/graph.h"

namespace doppler::graph {

// "%7 = matmul(%5, %2) : f32[T, 384]  # layers.0.attn.q_proj"
std::string FormatNode(const Graph& g, const Node& n);
std::string ToText(const Graph& g);

}  // namespace doppler::graph
