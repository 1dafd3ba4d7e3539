// What the Qwen families share: the standard decoder with optional projection biases, and
// sliding-window attention from layer max_window_layers on (when the config turns it on).
#pragma once

#include "absl/status/statusor.h"
#include "models/blocks.h"

namespace doppler::models {

absl::StatusOr<DecoderSpec> QwenDecoder(const formats::ModelConfig& c, bool qkv_bias, bool o_bias);

// Qwen3's decoder (models/qwen3.cc): QwenDecoder with per-head norms of q and k; Qwen3-MoE
// starts from it.
absl::StatusOr<DecoderSpec> Qwen3Decoder(const formats::ModelConfig& c);

}  // namespace doppler::models
