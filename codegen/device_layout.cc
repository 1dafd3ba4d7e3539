#include "codegen/device_layout.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace doppler::codegen {
namespace {
// Where the fields of a block of a split format lie in the stored block, and their sizes; on the
// device a row holds its blocks' quants, then their scales, then their d (d_bytes each: f16 d, or
// f16 d and f16 min as one word; none where the scales field holds d).
struct SplitFields {
  size_t quants_at, quants, scales_at, scales, d_at, d_bytes;
};
bool SplitFieldsOf(graph::DType dtype, SplitFields& f) {
  switch (dtype) {
    case graph::DType::kQ6_K:  // ql[128], qh[64], int8 scales[16], f16 d
      f = {0, 192, 192, 16, 208, 2};
      return true;
    case graph::DType::kQ5_0:  // f16 d, qh[4] (in the scales' place), qs[16]
      f = {6, 16, 2, 4, 0, 2};
      return true;
    case graph::DType::kQ4_0:   // f16 d, qs[16]
    case graph::DType::kIQ4_NL:  // f16 d, qs[16]
      f = {2, 16, 0, 0, 0, 2};
      return true;
    case graph::DType::kQ4_1:  // f16 d, f16 m, qs[16]
      f = {4, 16, 0, 0, 0, 4};
      return true;
    case graph::DType::kQ5_1:  // f16 d, f16 m, qh[4] (in the scales' place), qs[16]
      f = {8, 16, 4, 4, 0, 4};
      return true;
    case graph::DType::kQ2_K:  // scales[16], qs[64], f16 d, f16 dmin
      f = {16, 64, 0, 16, 80, 4};
      return true;
    case graph::DType::kQ3_K:  // hmask[32], qs[64] (the quants: 96 bytes), scales[12], f16 d
      f = {0, 96, 96, 12, 108, 2};
      return true;
    case graph::DType::kIQ4_XS:  // f16 d, u16 scales_h, scales_l[4] (an 8-byte header: the scales), qs[128]
      f = {8, 128, 0, 8, 0, 0};
      return true;
    case graph::DType::kMXFP4:  // E8M0 e (the scales), qs[16]
      f = {1, 16, 0, 1, 0, 0};
      return true;
    default:
      return false;
  }
}
}  // namespace

DeviceRow DeviceRowOf(graph::DType dtype, int64_t k) {
  const graph::DTypeInfo& info = graph::Info(dtype);
  if (dtype == graph::DType::kQ8_0) return {k / info.block_elems * kQ8_0DeviceBlock, false, 0, 0};
  SplitFields f;
  if (!SplitFieldsOf(dtype, f)) return {static_cast<int64_t>(graph::ByteSize(dtype, k)), false, 0, 0};
  const int64_t blocks = k / info.block_elems;
  const int64_t scales_at = blocks * static_cast<int64_t>(f.quants);
  const int64_t d_at = scales_at + blocks * static_cast<int64_t>(f.scales);
  return {(d_at + static_cast<int64_t>(f.d_bytes) * blocks + 15) / 16 * 16, true, scales_at, d_at};
}

size_t DeviceByteSize(graph::DType dtype, int64_t n, int64_t k) {
  if (!graph::IsBlockFormat(dtype) || k <= 0) return graph::ByteSize(dtype, n);
  return static_cast<size_t>(n / k) * static_cast<size_t>(DeviceRowOf(dtype, k).bytes);
}

std::vector<std::pair<std::string, std::string>> DeviceRowValues(graph::DType dtype, int64_t k) {
  const DeviceRow row = DeviceRowOf(dtype, k);
  return {{"ROW_BYTES", absl::StrCat(row.bytes)},
          {"SC_AT", absl::StrCat(row.scales_at)},
          {"D_AT", absl::StrCat(row.d_at)},
          {"Q8_0_BLOCK", absl::StrCat(kQ8_0DeviceBlock)},
          {"Q8_0_QS", absl::StrCat(kQ8_0DeviceQuantOffset)}};
}

std::vector<uint8_t> ToDeviceLayout(graph::DType dtype, int64_t k, std::vector<uint8_t> stored) {
  if (dtype == graph::DType::kQ8_0) {  // d, 2 bytes of padding, the quants
    const size_t stored_block = static_cast<size_t>(graph::Info(dtype).block_bytes);
    const size_t blocks = stored.size() / stored_block;
    std::vector<uint8_t> device(blocks * static_cast<size_t>(kQ8_0DeviceBlock), 0);
    for (size_t b = 0; b < blocks; ++b) {
      uint8_t* to = device.data() + b * static_cast<size_t>(kQ8_0DeviceBlock);
      std::memcpy(to, stored.data() + b * stored_block, 2);
      std::memcpy(to + kQ8_0DeviceQuantOffset, stored.data() + b * stored_block + 2, stored_block - 2);
    }
    return device;
  }
  SplitFields f;
  if (!SplitFieldsOf(dtype, f)) return stored;
  const DeviceRow row = DeviceRowOf(dtype, k);
  const size_t block = static_cast<size_t>(graph::Info(dtype).block_bytes);
  const size_t blocks_per_row = static_cast<size_t>(k / graph::Info(dtype).block_elems);
  if (blocks_per_row == 0) return stored;
  const size_t rows = stored.size() / (block * blocks_per_row);
  std::vector<uint8_t> device(rows * static_cast<size_t>(row.bytes), 0);
  for (size_t r = 0; r < rows; ++r) {
    uint8_t* to = device.data() + r * static_cast<size_t>(row.bytes);
    for (size_t b = 0; b < blocks_per_row; ++b) {
      const uint8_t* from = stored.data() + (r * blocks_per_row + b) * block;
      std::memcpy(to + b * f.quants, from + f.quants_at, f.quants);
      std::memcpy(to + static_cast<size_t>(row.scales_at) + b * f.scales, from + f.scales_at, f.scales);
      std::memcpy(to + static_cast<size_t>(row.d_at) + f.d_bytes * b, from + f.d_at, f.d_bytes);
    }
  }
  return device;
}

}  // namespace doppler::codegen
