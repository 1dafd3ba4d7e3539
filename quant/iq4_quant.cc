// Each group of 32 values gets a scale by a search: the group's largest magnitude mapped to either
// end of the grid (kIQ4NLValues), then 2·7 + 1 candidate scales around it, each quant the grid's
// nearest point and each candidate refined by least squares weighted by x², the best kept. IQ4_XS
// then quantizes the 8 groups' scales to 6 bits against the one of largest magnitude (which maps
// to -32 and sets d) and requantizes the values against the stored scales. The float32 operations
// follow ggml's order so that the bytes are ggml's.
#include "quant/iq4_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "graph/dtype.h"
#include "graph/half.h"
#include "quant/scale_search.h"

namespace doppler::quant::internal {
namespace {

using graph::kIQ4NLValues;

constexpr int kTries = 7;

// The index of the grid point nearest v (the lower on a tie).
int NearestGridIndex(float v) {
  if (v <= kIQ4NLValues[0]) return 0;
  if (v >= kIQ4NLValues[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (v < kIQ4NLValues[mid]) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return v - kIQ4NLValues[hi - 1] < kIQ4NLValues[hi] - v ? hi - 1 : hi;
}

void PutHalf(uint8_t* p, float v) {
  const uint16_t h = graph::FloatToHalf(v);
  p[0] = static_cast<uint8_t>(h & 0xff);
  p[1] = static_cast<uint8_t>(h >> 8);
}

// The searched scale of 32 values (0 for a group of near-zeros), their grid indices in L.
float GroupScale(const float* x, uint8_t* L) {
  float weight[32];
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    weight[j] = x[j] * x[j];
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  if (amax < 1e-15f) return 0;
  // Σ w·q·x and Σ w·q² with quants chosen for the inverse scale id.
  auto fit = [&](float id, float* sumqx, float* sumq2, bool keep) {
    *sumqx = *sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const int l = NearestGridIndex(id * x[j]);
      if (keep) L[j] = static_cast<uint8_t>(l);
      const float q = kIQ4NLValues[l];
      *sumqx += weight[j] * q * x[j];
      *sumq2 += weight[j] * q * q;
    }
  };
  float sumqx, sumq2;
  fit(1 / (-max / kIQ4NLValues[0]), &sumqx, &sumq2, true);
  float d = sumqx / sumq2;
  float best = d * sumqx;
  for (int itry = -kTries; itry <= kTries; ++itry) {
    fit((static_cast<float>(itry) + kIQ4NLValues[0]) / max, &sumqx, &sumq2, false);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

// The nibbles: value j < 16 of group g is the low nibble of qs[16g + j], value j + 16 its high.
void PackNibbles(const uint8_t* L, int groups, uint8_t* qs) {
  for (int g = 0; g < groups; ++g) {
    for (int j = 0; j < 16; ++j) qs[16 * g + j] = static_cast<uint8_t>(L[32 * g + j] | (L[32 * g + 16 + j] << 4));
  }
}

}  // namespace

void QuantizeIQ4_NL(const float* x, uint8_t* block) {
  uint8_t L[32] = {};
  const float d = GroupScale(x, L);
  PutHalf(block, d);
  const float id = d != 0 ? 1 / d : 0;
  for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(NearestGridIndex(id * x[j]));
  PackNibbles(L, 1, block + 2);
}

void QuantizeIQ4_XS(const float* x, uint8_t* block) {
  uint8_t L[256] = {};
  float scales[8];
  float max_scale = 0, amax_scale = 0;
  for (int g = 0; g < 8; ++g) {
    scales[g] = GroupScale(x + 32 * g, L + 32 * g);
    if (std::fabs(scales[g]) > amax_scale) {
      amax_scale = std::fabs(scales[g]);
      max_scale = scales[g];
    }
  }
  const float d = -max_scale / 32;
  PutHalf(block, d);
  const float id = d != 0 ? 1 / d : 0.f;
  uint16_t scales_h = 0;
  uint8_t* scales_l = block + 4;
  std::memset(scales_l, 0, 4);
  for (int g = 0; g < 8; ++g) {
    const int l = std::clamp(NearestInt(id * scales[g]), -32, 31);
    const float dl = d * static_cast<float>(l);
    const float idl = dl != 0 ? 1 / dl : 0.f;
    for (int j = 0; j < 32; ++j) L[32 * g + j] = static_cast<uint8_t>(NearestGridIndex(idl * x[32 * g + j]));
    const int ls = l + 32;
    scales_l[g / 2] |= static_cast<uint8_t>((ls & 0xF) << (4 * (g % 2)));
    scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * g));
  }
  block[2] = static_cast<uint8_t>(scales_h & 0xff);
  block[3] = static_cast<uint8_t>(scales_h >> 8);
  PackNibbles(L, 8, block + 8);
}

}  // namespace doppler::quant::internal
