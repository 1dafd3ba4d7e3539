// The 12-byte scale field shared by Q4_K and Q5_K: eight 6-bit scales and eight 6-bit mins.
// Sub-blocks 0-3 keep theirs in the low 6 bits of bytes 0-3 (scale) and 4-7 (min); sub-blocks
// 4-7 keep their low 4 bits as the nibbles of bytes 8-11 (scale low, min high) and their top
// 2 bits in the spare top bits of bytes 0-3 (scale) and 4-7 (min).
#pragma once

#include <cstdint>

namespace doppler::quant::internal {

inline void UnpackScaleMin(const uint8_t* scales, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
    *m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

// sc and m must be in [0, 63]; `scales` must start zeroed.
inline void PackScaleMin(uint8_t* scales, int j, int sc, int m) {
  if (j < 4) {
    scales[j] |= static_cast<uint8_t>(sc);
    scales[j + 4] |= static_cast<uint8_t>(m);
  } else {
    scales[j + 4] = static_cast<uint8_t>((sc & 0xF) | ((m & 0xF) << 4));
    scales[j - 4] |= static_cast<uint8_t>((sc >> 4) << 6);
    scales[j] |= static_cast<uint8_t>((m >> 4) << 6);
  }
}

}  // namespace doppler::quant::internal
