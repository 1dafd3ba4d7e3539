// Model configuration from GGUF metadata: the ModelConfig that ReadHfConfig gives for the HF
// checkpoint the file was converted from.
#pragma once

#include "absl/status/statusor.h"
#include "models/gguf/gguf_file.h"
#include "models/hf_config.h"

namespace doppler::models {

// Supports the general.architecture values gguf_arch.h lists (anything else is an error listing
// them). Reads the `{arch}.*` hyperparameters and the tokenizer's BOS/EOS ids; tied
// embeddings = no output.weight tensor; Llama 3 RoPE scaling is recovered from the
// rope_freqs.weight tensor (see gguf_config.cc); a file with experts is its architecture's
// mixture-of-experts family, its router and expert tensors checked (gguf_experts.h). `raw` holds
// the equivalent config.json.
absl::StatusOr<ModelConfig> ConfigFromGguf(const GgufFile& file);

}  // namespace doppler::models
