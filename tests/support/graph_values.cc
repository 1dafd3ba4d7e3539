#include "tests/support/graph_values.h"

#include "tests/support/gpu_runner.h"

namespace doppler::test {

graph::TensorType Rows(int64_t cols, graph::DType dtype) {
  return {dtype, {graph::Dim::Tokens(), graph::Dim::Static(cols)}};
}

graph::TensorType Matrix(int64_t rows, int64_t cols, graph::DType dtype) {
  return {dtype, {graph::Dim::Static(rows), graph::Dim::Static(cols)}};
}

graph::TensorType Vector(int64_t n, graph::DType dtype) { return {dtype, {graph::Dim::Static(n)}}; }

graph::Tensor RandomRows(int64_t tokens, int64_t cols, uint32_t seed) {
  return graph::Tensor::F32({tokens, cols}, RandomFloats(static_cast<size_t>(tokens * cols), seed));
}

}  // namespace doppler::test
