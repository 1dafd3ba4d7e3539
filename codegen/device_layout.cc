#include "codegen/device_layout.h"

#include <cstring>

namespace doppler::codegen {
namespace {
constexpr int64_t kQ6KDeviceBlockBytes = 212;
}  // namespace

int64_t DeviceBlockBytes(graph::DType dtype) {
  if (dtype == graph::DType::kQ6_K) return kQ6KDeviceBlockBytes;
  return graph::Info(dtype).block_bytes;
}

size_t DeviceByteSize(graph::DType dtype, int64_t n) {
  return static_cast<size_t>(n / graph::Info(dtype).block_elems) * static_cast<size_t>(DeviceBlockBytes(dtype));
}

std::vector<uint8_t> ToDeviceLayout(graph::DType dtype, std::vector<uint8_t> stored) {
  const size_t stored_block = static_cast<size_t>(graph::Info(dtype).block_bytes);
  const size_t device_block = static_cast<size_t>(DeviceBlockBytes(dtype));
  if (device_block == stored_block) return stored;
  const size_t blocks = stored.size() / stored_block;
  std::vector<uint8_t> device(blocks * device_block, 0);
  for (size_t b = 0; b < blocks; ++b) {
    std::memcpy(device.data() + b * device_block, stored.data() + b * stored_block, stored_block);
  }
  return device;
}

}  // namespace doppler::codegen
