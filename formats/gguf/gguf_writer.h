// Writer of GGUF v3 files (little-endian): metadata key/values, tensor infos, then the tensors'
// data, each at an offset aligned to `alignment` (32, GGUF's default, unless general.alignment
// says otherwise). Tensor data is produced one tensor at a time while writing, so converting a
// large model holds one tensor in memory, not the model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/dtype.h"

namespace doppler::formats {

class GgufWriter {
 public:
  // The bytes of one tensor, asked for when it is written.
  using Producer = std::function<absl::StatusOr<std::vector<uint8_t>>()>;
  // Called after each tensor is written: (tensors done, total, name).
  using Progress = std::function<void(size_t, size_t, const std::string&)>;

  explicit GgufWriter(uint32_t alignment = 32) : alignment_(alignment) {}

  // Metadata, in the order added. A repeated key is an error when writing.
  void AddString(const std::string& key, const std::string& value);
  void AddU32(const std::string& key, uint32_t value);
  void AddF32(const std::string& key, float value);
  void AddBool(const std::string& key, bool value);
  void AddStringArray(const std::string& key, const std::vector<std::string>& values);
  void AddF32Array(const std::string& key, const std::vector<float>& values);
  void AddI32Array(const std::string& key, const std::vector<int32_t>& values);

  // A tensor of `shape` (outermost first, as safetensors and TensorView give it; GGUF stores the
  // dims innermost first) whose bytes `produce` returns: exactly ByteSize(dtype, elements), rows
  // of whole blocks for block formats. Checked here; a mismatch of the produced bytes fails Write.
  absl::Status AddTensor(const std::string& name, graph::DType dtype, const std::vector<int64_t>& shape,
                         Producer produce);

  size_t tensor_count() const { return tensors_.size(); }
  uint64_t data_bytes() const;  // the tensor data section, padding included

  // Writes the file (to `path`.tmp, renamed to `path` once complete). Errors name the file and,
  // where one is at fault, the tensor.
  absl::Status Write(const std::filesystem::path& path, const Progress& progress = {}) const;

 private:
  struct Tensor {
    std::string name;
    graph::DType dtype;
    std::vector<int64_t> shape;
    size_t nbytes;
    uint64_t offset;  // relative to the data section
    Producer produce;
  };
  void Key(const std::string& key, uint32_t type);

  uint32_t alignment_;
  std::vector<uint8_t> kv_;  // encoded key/values
  uint64_t kv_count_ = 0;
  std::vector<std::string> keys_;
  std::vector<Tensor> tensors_;
  uint64_t next_offset_ = 0;
};

// GGML's type number for a dtype (F32 0, F16 1, Q8_0 8, Q4_K 12, Q5_K 13, Q6_K 14, BF16 30).
absl::StatusOr<uint32_t> GgmlTypeOf(graph::DType dtype);

}  // namespace doppler::formats
