// A read-only memory map of a whole file (RAII). Weight readers hand out pointers into it, so
// tensors are never copied on the CPU side.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "absl/status/statusor.h"

namespace doppler::formats {

class MappedFile {
 public:
  // Fails (naming the path) if the file is missing, not a regular file, or cannot be mapped.
  // An empty file is fine: size() is 0 and data() is nullptr.
  static absl::StatusOr<MappedFile> Open(const std::filesystem::path& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void Reset();

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace doppler::formats
