// Values stored in planes between two kernels. The expert products' matrix-vector kernel against
// float x (codegen/emit_experts.cc) gives each invocation a part of x (PV values: a whole weight
// block of MXFP4, eight f16 weights) in PV / 4 four-value loads; with x in its order, the
// invocations of a subgroup, taking neighbouring parts, read a different cache line each, and each
// load takes a cycle of the L1 cache a line. In planes, vector v of every part lies together, so
// that each load of a subgroup reads neighbouring vectors (a few lines). A row of K values in
// planes of PV holds value k at (k % PV / 4 · (K / PV) + k / PV) · 4 + k % 4. No result changes:
// the values are the same, in another place.
// A fact of the step graph and the plan's bucket, derived here on each lowering and
// stored nowhere (as codegen/in_matmul.h's): the producer's store and its readers' loads consult it.
//
//  - Producers: an expert product's matrix-vector kernel (its y, not summed into a route sum), a
//    float matmul that writes a plain norm's row (codegen/in_matmul.h's plain norm written by its
//    float reader). Not a graph output (read back by the host).
//  - Readers: every other reader an expert product's matrix-vector kernel against float x (no
//    x_quant, not grouped, not computing the norm), reading the value as x alone, whose parts
//    are whole runs of PV consecutive values (WeightParts::contiguous), PV a multiple of 4, all
//    with the same PV and rows of K values (its weight's columns).
//
// DOPPLER_TUNE's matmul.planes_x (1 or 0, InMatMulRules::planes_x) turns the rule on or off.
#pragma once

#include <cstdint>
#include <string>

#include "codegen/in_matmul.h"
#include "graph/graph.h"

namespace doppler::codegen {

// The planes a value lies in: rows of `k` values, parts of `part_values` (0: in order).
struct PlaneX {
  int64_t k = 0;
  int64_t part_values = 0;
  bool planes() const { return part_values > 0; }
};

// How `v` is stored in a plan of `tokens`.
PlaneX PlaneXOf(const graph::Graph& g, const graph::Node& v, int64_t tokens, const InMatMulRules& rules);

// GLSL `uint NAME(uint i)`: where element i of a value in order lies in `planes` (planes()
// holds).
std::string PlaneIndexGlsl(const std::string& name, const PlaneX& planes);

}  // namespace doppler::codegen
