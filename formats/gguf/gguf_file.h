// Reader for llama.cpp's GGUF files (versions 2 and 3, little-endian): metadata key/values and
// tensors, memory-mapped. The whole header is validated when the file opens (every count,
// length, type, shape and offset against what the file can hold), so nothing read later can
// point outside the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/mapped_file.h"
#include "formats/weight_store.h"
#include "graph/dtype.h"

namespace doppler::formats {

// Metadata value types, numbered as in the file.
enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
const char* GgufTypeName(GgufType t);  // "u8", ..., "array"

// An array value, left encoded in the mapped file (token lists hold 10^5 strings that most
// callers never read) and decoded on request. Validated when the file was opened.
struct GgufArray {
  GgufType elem_type;
  uint64_t count;
  const uint8_t* data;  // the encoded elements
  size_t nbytes;
};

// One metadata value: unsigned ints (and nothing else) as uint64_t, signed ints as int64_t,
// f32/f64 as double, bool, string, or an array.
struct GgufValue {
  GgufType type;
  std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> value;
};

struct GgufTensorInfo {
  std::string name;
  graph::DType dtype;
  std::vector<int64_t> dims;  // as stored: innermost (contiguous) first
  uint64_t offset;            // absolute byte offset of the data in the file
  size_t nbytes;
};

class GgufFile : public WeightStore {
 public:
  // Errors name the file, what was being read and the byte offset where it went wrong.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::filesystem::path& path);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::string& path() const { return map_.path(); }

  // Metadata. A missing key is NotFound; a value of another type is InvalidArgument; both name
  // the key and the file.
  const std::vector<std::string>& Keys() const { return keys_; }  // in file order
  const GgufValue* Find(std::string_view key) const;
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;  // any integer type that fits int64
  // An optional integer: nullopt where the key is missing.
  absl::StatusOr<std::optional<int64_t>> GetOptionalInt(std::string_view key) const;
  absl::StatusOr<double> GetFloat(std::string_view key) const;  // f32, f64 or any integer type
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<uint64_t> GetArrayLength(std::string_view key) const;
  absl::StatusOr<std::vector<GgufValue>> GetArray(std::string_view key) const;  // any elements
  absl::StatusOr<std::vector<std::string>> GetStringArray(std::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> GetIntArray(std::string_view key) const;
  absl::StatusOr<std::vector<double>> GetFloatArray(std::string_view key) const;
  // The elements of an array value (of this file), e.g. one nested in another.
  std::vector<GgufValue> Elements(const GgufArray& array) const;

  // Tensors in file order, with GGUF's dims; Get() gives them outermost-first like safetensors.
  const std::vector<GgufTensorInfo>& Tensors() const { return tensors_; }

  // WeightStore.
  bool Has(std::string_view name) const override;
  absl::StatusOr<TensorView> Get(std::string_view name) const override;
  std::vector<std::string> Names() const override;
  std::string Describe() const override { return map_.path(); }

 private:
  friend class GgufParser;
  GgufFile() = default;
  absl::StatusOr<const GgufValue*> Lookup(std::string_view key) const;  // NotFound names key and file

  MappedFile map_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<std::string> keys_;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;  // name -> index in tensors_
};

}  // namespace doppler::formats
