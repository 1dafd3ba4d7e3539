// Output type of a compute op from its inputs and attributes; the builder uses it to type new
// nodes and the verifier to re-check every node after a pass.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "graph/epilogue.h"
#include "graph/graph.h"

namespace doppler::graph {

absl::StatusOr<TensorType> InferType(const Graph& g, OpKind kind, const std::vector<ValueId>& inputs,
                                     const Attrs& attrs);

// A chain with clamped_swiglu needs the node's attrs alpha (finite) and limit (positive).
absl::Status CheckGatedActivationAttrs(OpKind kind, const std::vector<EpilogueStep>& steps, const Attrs& attrs);

// A product's optional attr x_quant: "q8", over rows of k values, k a multiple of kQ8Block
// (graph/activation_quant.h).
absl::Status CheckXQuant(OpKind kind, const Attrs& attrs, int64_t k);

}  // namespace doppler::graph
