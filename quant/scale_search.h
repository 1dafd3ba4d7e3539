// The per-sub-block scale searches of ggml's reference k-quantizers. Both try a small grid of
// candidate scales around the obvious one and keep the one with the least weighted squared
// error. Byte-exactness with ggml needs the same candidates, the same float32 arithmetic in the
// same order, and the same round-half-to-even, so these follow ggml's algorithm step by step.
#pragma once

#include <cstdint>

namespace doppler::quant::internal {

// Round to nearest, ties to even (ggml's rounding for quants). Inputs beyond +-2^22, which ggml
// rejects, are clamped there (every caller clamps further); NaN gives 0.
int NearestInt(float v);

// Symmetric quants in [-nmax, nmax-1] with weights x^2 (Q6_K). Writes L[i] = q + nmax and
// returns the scale (x ~ scale * q); 0 (and L = 0) for an all-near-zero group.
float SymmetricScale(int n, int nmax, const float* x, uint8_t* L);

// Asymmetric quants in [0, nmax] with x ~ scale * q - min and min >= 0 (Q4_K, Q5_K), weighted by
// `weights`. Tries candidate scales (rmin + rdelta * k + nmax) / (max - min), k = 0..nstep, each
// refined by weighted least squares. Writes L, *min_out, returns the scale. `aux` is scratch of n.
float AsymmetricScale(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* min_out,
                      uint8_t* aux, float rmin, float rdelta, int nstep);

}  // namespace doppler::quant::internal
