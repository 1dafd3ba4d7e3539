// IEEE half and bfloat16 conversions (round to nearest, ties to even), shared by the interpreter,
// the weight loaders and the tests.
#pragma once

#include <cstdint>

namespace doppler::graph {

// Exact: every f16 value (subnormals, +-inf, NaN) is representable in float32.
float HalfToFloat(uint16_t h);
// Round to nearest, ties to even; overflow gives +-inf, tiny values give f16 subnormals or +-0.
// NaN stays NaN (quiet, sign and top payload bits kept).
uint16_t FloatToHalf(float f);
// Exact: bf16 is the upper half of a float32.
float BF16ToFloat(uint16_t b);
// Round to nearest, ties to even; NaN stays a quiet NaN.
uint16_t FloatToBF16(float f);

}  // namespace doppler::graph
