// RoPE tables: from a RopeConfig to the per-frequency inverse frequencies and the attention factor
// that multiplies cos and sin, computed as transformers' rope-init functions compute them (float32
// steps), for every scaling doppler reads: default, linear, llama3, yarn and longrope.
#pragma once

#include <cstdint>
#include <vector>

#include "formats/hf_config.h"

namespace doppler::models {

struct RopeFrequencies {
  std::vector<float> inv_freq;     // rotary_dim / 2 values
  float attention_factor = 1.0f;   // cos and sin are multiplied by it (yarn, longrope)
};

// `context` is the longest sequence the table serves: LongRoPE uses its long factors when it
// exceeds the original context, its short factors otherwise (llama.cpp decides the same way, by
// context size; transformers by the current sequence length, which agrees whenever the sequence
// is longer than the original context).
RopeFrequencies ComputeRope(const formats::RopeConfig& rope, int rotary_dim, int64_t context);

}  // namespace doppler::models
