// How decode steps' matrix-vector products take their input x (graph/activation_quant.h): the
// choice from the option and the device, for every engine's decode plans.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "codegen/kernel.h"
#include "graph/graph.h"
#include "runtime/engine.h"

namespace doppler::runtime {

// `g` with x_quant on its block-quantized matmuls and expert products where decode rounds x through
// q8 (kQ8, or kAuto on a device with integer dot products), but for expert products whose x the
// device cannot stage as q8 (codegen/tuning/experts.h: ExpertsTakeQ8); else `g` as it is. kQ8 on a
// device without them is an error naming `device`.
absl::StatusOr<graph::Graph> WithDecodeActivations(graph::Graph g, DecodeActivations want,
                                                   const codegen::TargetCaps& caps, const std::string& device);

}  // namespace doppler::runtime
