// Tensor shapes whose dimensions are static or the symbolic token count T of a step.
//
// A plan is specialised for a bucket of T (decode: 1, prefill: a chunk); the actual token count
// of a step is a runtime value no larger than the bucket, so T stays symbolic in the graph.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/dtype.h"

namespace doppler::graph {

struct Dim {
  int64_t value = 0;    // the size when static; unused when symbolic
  bool tokens = false;  // true: this dimension is T

  static Dim Static(int64_t v) { return Dim{v, false}; }
  static Dim Tokens() { return Dim{0, true}; }
  int64_t Resolve(int64_t t) const { return tokens ? t : value; }
  bool operator==(const Dim&) const = default;
};

using Shape = std::vector<Dim>;

struct TensorType {
  DType dtype = DType::kF32;
  Shape shape;
  bool operator==(const TensorType&) const = default;
};

// Number of elements once T is known.
int64_t NumElements(const Shape& shape, int64_t tokens);
// Shape with T replaced by a concrete token count.
std::vector<int64_t> Resolve(const Shape& shape, int64_t tokens);
// "[T, 128]"
std::string ToString(const Shape& shape);
// "f32[T, 128]"
std::string ToString(const TensorType& type);

}  // namespace doppler::graph
