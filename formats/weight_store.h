// The interface every weight file reader (safetensors, GGUF, ...) implements: a read-only
// name -> tensor map whose data stays memory-mapped for as long as the store lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/dtype.h"

namespace doppler::formats {

struct TensorView {
  std::string name;
  graph::DType dtype;
  std::vector<int64_t> shape;  // row-major, outermost first ([out, in] for a Linear weight)
  const uint8_t* data;         // points into a memory-mapped file, valid while the store lives
  size_t nbytes;
  std::string file;            // the file it came from, for error messages
};

class WeightStore {
 public:
  virtual ~WeightStore() = default;
  virtual bool Has(std::string_view name) const = 0;
  // NotFound names the tensor and the file(s) searched; other errors (e.g. an unsupported
  // dtype) name the tensor and its file.
  virtual absl::StatusOr<TensorView> Get(std::string_view name) const = 0;
  virtual std::vector<std::string> Names() const = 0;  // sorted
  virtual std::string Describe() const = 0;            // the directory or file path, for messages
};

}  // namespace doppler::formats
