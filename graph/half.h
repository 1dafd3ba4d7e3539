// IEEE half and bfloat16 conversions (round to nearest, ties to even), shared by the interpreter,
// the weight loaders and the tests.
#pragma once

#include <cstdint>

namespace doppler::graph {

float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BF16ToFloat(uint16_t b);
uint16_t FloatToBF16(float f);

}  // namespace doppler::graph
