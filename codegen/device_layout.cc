#include "codegen/device_layout.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace doppler::codegen {
namespace {
// Where the padding goes in a block: after the stored bytes [0, at).
struct Padding {
  size_t at, bytes;
};
Padding PaddingOf(graph::DType dtype) {
  switch (dtype) {
    case graph::DType::kQ6_K:
      return {210, 2};
    case graph::DType::kQ8_0:
      return {2, static_cast<size_t>(kQ8_0DeviceQuantOffset) - 2};
    default:
      return {0, 0};
  }
}
}  // namespace

int64_t DeviceBlockBytes(graph::DType dtype) {
  return graph::Info(dtype).block_bytes + static_cast<int64_t>(PaddingOf(dtype).bytes);
}

size_t DeviceByteSize(graph::DType dtype, int64_t n) {
  return static_cast<size_t>(n / graph::Info(dtype).block_elems) * static_cast<size_t>(DeviceBlockBytes(dtype));
}

std::vector<std::pair<std::string, std::string>> DeviceLayoutValues() {
  return {{"Q6K_BLOCK", absl::StrCat(DeviceBlockBytes(graph::DType::kQ6_K))},
          {"Q8_0_BLOCK", absl::StrCat(DeviceBlockBytes(graph::DType::kQ8_0))},
          {"Q8_0_QS", absl::StrCat(kQ8_0DeviceQuantOffset)}};
}

std::vector<uint8_t> ToDeviceLayout(graph::DType dtype, std::vector<uint8_t> stored) {
  const size_t stored_block = static_cast<size_t>(graph::Info(dtype).block_bytes);
  const size_t device_block = static_cast<size_t>(DeviceBlockBytes(dtype));
  if (device_block == stored_block) return stored;
  const Padding pad = PaddingOf(dtype);
  const size_t blocks = stored.size() / stored_block;
  std::vector<uint8_t> device(blocks * device_block, 0);
  for (size_t b = 0; b < blocks; ++b) {
    const uint8_t* from = stored.data() + b * stored_block;
    uint8_t* to = device.data() + b * device_block;
    std::memcpy(to, from, pad.at);
    std::memcpy(to + pad.at + pad.bytes, from + pad.at, stored_block - pad.at);
  }
  return device;
}

}  // namespace doppler::codegen
