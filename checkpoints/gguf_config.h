// Model configuration from GGUF metadata: the ModelConfig that ReadHfConfig gives for the HF
// checkpoint the file was converted from.
#pragma once

#include "absl/status/statusor.h"
#include "formats/gguf/gguf_file.h"
#include "formats/hf_config.h"

namespace doppler::checkpoints {

// Supports the general.architecture values gguf_arch.h lists (anything else is an error listing
// them). Reads the `{arch}.*` hyperparameters and the tokenizer's BOS/EOS ids; tied
// embeddings = no output.weight tensor; Llama 3 RoPE scaling is recovered from the
// rope_freqs.weight tensor (see gguf_config.cc); a file with experts is its architecture's
// mixture-of-experts family, its router and expert tensors checked (gguf_experts.h). `raw` holds
// the equivalent config.json.
absl::StatusOr<formats::ModelConfig> ConfigFromGguf(const formats::GgufFile& file);

}  // namespace doppler::checkpoints
