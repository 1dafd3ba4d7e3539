// Structural checks of a graph: run after building and after every pass.
#pragma once

#include "absl/status/status.h"
#include "graph/graph.h"

namespace doppler::graph {

// Checks that: node ids match positions; inputs exist and come earlier (topological, no dangling
// values); arity and required attribute types match the op; every compute node's type equals what
// type inference derives; source names are unique per kind; const data matches its shape;
// outputs name existing values.
absl::Status Verify(const Graph& g);

}  // namespace doppler::graph
