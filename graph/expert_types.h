// Type inference of the mixture-of-experts ops (top_k, route_weights, expert_matmul, route_sum; meanings in
// graph/op.h), kept beside the other ops' in type_inference.cc.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "graph/op.h"
#include "graph/shape.h"

namespace doppler::graph {

absl::StatusOr<TensorType> InferExpertOpType(OpKind kind, const std::vector<TensorType>& in, const Attrs& attrs);

// The route weightings route_weights accepts: "softmax_chosen", "softmax_all".
bool IsRouteWeighting(const std::string& weighting);

}  // namespace doppler::graph
