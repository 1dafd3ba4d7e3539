#include "quant/scale_search.h"

#include <algorithm>
#include <cmath>

namespace doppler::quant::internal {
namespace {

// ggml treats a group whose largest magnitude is below this as all zeros.
constexpr float kGroupMaxEps = 1e-15f;

int Clamp(int v, int lo, int hi) { return std::min(hi, std::max(lo, v)); }

}  // namespace

int NearestInt(float v) {
  constexpr float kLimit = 4194303.0f;  // 2^22 - 1: where ggml's rounding trick stops being exact
  if (!(std::fabs(v) <= kLimit)) return std::isnan(v) ? 0 : (v > 0 ? 4194303 : -4194303);
  return static_cast<int>(std::nearbyint(v));  // default rounding mode: ties to even
}

float SymmetricScale(int n, int nmax, const float* x, uint8_t* L) {
  // The signed value of largest magnitude sets the scale, so that it maps to exactly -nmax
  // (the quant range is one longer on the negative side).
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, 0);
    return 0.0f;
  }
  // Weighted least-squares scale for the quants given by one inverse scale, weights x^2.
  auto fit = [&](float iscale, float* sumlx, float* suml2) {
    *sumlx = 0;
    *suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = Clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      *sumlx += w * x[i] * static_cast<float>(l);
      *suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
  };
  auto assign = [&](float iscale) {
    for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(nmax + Clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1));
  };
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx, suml2;
  fit(iscale, &sumlx, &suml2);
  assign(iscale);
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;  // the error reduction of a least-squares fit: larger is better
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / max;
    fit(iscale, &sumlx, &suml2);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      assign(iscale);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

float AsymmetricScale(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* min_out,
                      uint8_t* aux, float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0) min = 0;  // the offset only ever shifts values up: q = 0 must reach 0 or below
  if (max == min) {
    std::fill(L, L + n, 0);
    *min_out = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_err = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(Clamp(NearestInt(iscale * (x[i] - min)), 0, nmax));
    const float diff = scale * static_cast<float>(L[i]) + min - x[i];
    best_err += weights[i] * (diff * diff);
  }
  for (int step = 0; step <= nstep; ++step) {
    iscale = (rmin + rdelta * static_cast<float>(step) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = Clamp(NearestInt(iscale * (x[i] - min)), 0, nmax);
      aux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * static_cast<float>(l);
      sum_l2 += w * static_cast<float>(l) * static_cast<float>(l);
      sum_xl += w * static_cast<float>(l) * x[i];
    }
    // Weighted least squares for x ~ s * l + m over these quants.
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {  // a positive offset cannot be stored: refit the scale alone
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = this_scale * static_cast<float>(aux[i]) + this_min - x[i];
      err += weights[i] * (diff * diff);
    }
    if (err < best_err) {
      std::copy(aux, aux + n, L);
      best_err = err;
      scale = this_scale;
      min = this_min;
    }
  }
  *min_out = -min;
  return scale;
}

}  // namespace doppler::quant::internal
