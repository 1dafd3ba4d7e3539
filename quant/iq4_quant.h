// ggml's reference quantizers of the non-linear 4-bit formats (no importance matrix): IQ4_NL (one
// f16 d per 32 values) and IQ4_XS (256-value blocks: an f16 d and a 6-bit scale per 32 values).
#pragma once

#include <cstdint>

namespace doppler::quant::internal {

void QuantizeIQ4_NL(const float* x, uint8_t* block);  // 32 values -> 18 bytes
void QuantizeIQ4_XS(const float* x, uint8_t* block);  // 256 values -> 136 bytes

}  // namespace doppler::quant::internal
