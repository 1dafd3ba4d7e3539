// Machine-readable forms of a graph for `doppler graph`: JSON (schema in docs/graph-format.md)
// and Graphviz DOT. They live with the tool because the JSON one uses nlohmann::json, which the
// graph library does not link; the text form is graph::ToText.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"

namespace doppler::cli {

// One JSON object (one line): {"format": "doppler-graph", "version": 1, "pipeline": [...], "after": ...,
// "nodes": [...], "outputs": {...}}. `after` names the pass the graph is shown after ("input": as
// built); `changed` is whether that pass changed it (left out for "input").
std::string GraphToJson(const graph::Graph& g, const std::vector<std::string>& pipeline, const std::string& after,
                        bool changed);

// A `digraph` for Graphviz: sources as ellipses, kernels as boxes, fused nodes filled orange with
// a double border and what they absorbed in their label, outputs as plain text.
std::string GraphToDot(const graph::Graph& g, const std::string& title);

}  // namespace doppler::cli
