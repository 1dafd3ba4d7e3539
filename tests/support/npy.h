// Minimal reader for the reference .npy files: NumPy format 1.0/2.0, little-endian float32
// ('<f4'), C order. Anything else is an error naming the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "absl/status/statusor.h"

namespace doppler::test {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;  // row-major
};

absl::StatusOr<NpyArray> ReadNpy(const std::filesystem::path& path);

}  // namespace doppler::test
