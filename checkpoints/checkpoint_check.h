// Checks a model's configuration against its checkpoint's tensors before anything is built from
// it: a config that claims more layers, other heads or another vocabulary than the file holds is
// one error naming both, instead of a graph sized from the config alone (a billion layers, say).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "formats/hf_config.h"
#include "formats/weight_store.h"

namespace doppler::checkpoints {

// How the user knows the model's keys and tensors: an HF directory's config.json names, or a GGUF
// file's metadata keys and llama.cpp tensor names.
enum class CheckpointNaming { kHf, kGguf };

// The layer count, the embedding's [vocab, hidden] shape, and layer 0's attention and MLP shapes
// (where the checkpoint has those tensors) against `config`.
absl::Status CheckConfigAgainstCheckpoint(const formats::ModelConfig& config, const formats::WeightStore& store, CheckpointNaming naming);

// A config key in the user's terms: "num_hidden_layers", or for a GGUF "llama.block_count".
std::string ConfigKeyName(const std::string& hf_key, const formats::ModelConfig& config, CheckpointNaming naming);

}  // namespace doppler::checkpoints
