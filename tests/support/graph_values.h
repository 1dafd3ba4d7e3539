// Shorthands for the types and random values that graph and kernel tests build.
#pragma once

#include <cstdint>

#include "graph/interpreter.h"
#include "graph/shape.h"

namespace doppler::test {

// [T, cols]
graph::TensorType Rows(int64_t cols, graph::DType dtype = graph::DType::kF32);
// [rows, cols]
graph::TensorType Matrix(int64_t rows, int64_t cols, graph::DType dtype = graph::DType::kF32);
// [n]
graph::TensorType Vector(int64_t n, graph::DType dtype = graph::DType::kF32);
// f32 [tokens, cols] uniform in [-1, 1), from a seed.
graph::Tensor RandomRows(int64_t tokens, int64_t cols, uint32_t seed);

}  // namespace doppler::test
