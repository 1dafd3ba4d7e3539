// A matrix-vector kernel reads each weight row in "parts": a fixed number of values one invocation
// decodes together, chosen so that a part shares its block's scales and its quants come in whole
// 32-bit words. Consecutive invocations take consecutive parts, so a subgroup's loads are
// contiguous, and each block's scale fields are decoded once per part instead of once per value.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "graph/dtype.h"

namespace doppler::codegen {

struct WeightParts {
  int64_t values = 0;     // values per part (PV)
  int64_t per_row = 0;    // parts per weight row
  // GLSL for the weight buffer `w` at the given binding, plus
  //   uint w_part_k(uint p, uint i): the column (0..K) of value i of part p of a row
  //   void w_part(uint row, uint p, out float v[PV]): the values of part p of weight row `row`
  // and `const uint PV`.
  std::string glsl;
};

// The part decoder of a [rows, k] weight matrix stored as `dtype`.
absl::StatusOr<WeightParts> WeightPartDecoder(uint32_t binding, graph::DType dtype, int64_t k);

}  // namespace doppler::codegen
