// The meaning of a matmul's or an expert product's x_quant = "q8" (graph/op.h): x is rounded, row
// by row, in blocks of 32 consecutive values along K, to 8-bit integers times one scale per block,
// as llama.cpp rounds the activations it multiplies with block-quantized weights (its Q8_1 blocks,
// with the scale in f32).
// A kernel then needs only integer dot products of the weights' quants with x's.
//
// For a block x[0..31]:
//   amax = max |x_i|
//   d    = amax · kQ8InverseMax          (an f32 product: kQ8InverseMax is 1/127 rounded to f32)
//   id   = d > 0 ? 1 / d : 0             (f32 division)
//   q_i  = roundEven(x_i · id)           (the f32 product, then to the nearest integer, ties to
//                                         even; |q_i| <= 127)
//   x'_i = d · q_i
// codegen/q8_x.h's staging follows these steps on the GPU, where 1 / d may be a few ulps off a
// correctly rounded division: a product that lands that close to a half rounds the other way there,
// moving one value by d (the kernel tests allow for it).
#pragma once

#include <cstdint>

namespace doppler::graph {

inline constexpr int64_t kQ8Block = 32;
inline constexpr float kQ8InverseMax = 1.0f / 127.0f;  // 0x3C010204

// Rounds x[0..n) (n a multiple of kQ8Block) through q8 blocks into out (which may be x).
void RoundThroughQ8(const float* x, int64_t n, float* out);

}  // namespace doppler::graph
