// Mixtures of experts in GGUF metadata and tensors, read as llama.cpp's loader reads them
// (gguf_arch.h, GgufMoe): {arch}.expert_count experts, {arch}.expert_used_count of them per token,
// and each layer's router and stacked experts.
#pragma once

#include "absl/status/status.h"
#include "checkpoints/gguf_arch.h"
#include "formats/gguf/gguf_file.h"
#include "formats/hf_config.h"
#include "nlohmann/json.hpp"

namespace doppler::checkpoints {

// The experts' keys of `config` (the equivalent config.json being written from `f`'s metadata):
// the mixture-of-experts class, num_local_experts, num_experts_per_tok and moe_intermediate_size.
// Leaves a dense file of an architecture whose experts are optional (llama) as it is. Errors name
// the GGUF key: no experts where the architecture needs them, more used than there are, experts
// used in a file without any, expert tensors in a file whose metadata has no experts.
absl::Status AddGgufExpertsConfig(const formats::GgufFile& f, const GgufArch& arch, nlohmann::json& config);

// Every layer's router and stacked experts against `config`: blk.N.ffn_gate_inp [E, hidden],
// ffn_gate_exps and ffn_up_exps [E, width, hidden], ffn_down_exps [E, hidden, width] (outermost
// first), for the layers the file holds. A missing or misshapen one is an error naming it and the
// keys its shape follows from.
absl::Status CheckGgufExperts(const formats::GgufFile& f, const GgufArch& arch, const formats::ModelConfig& config);

}  // namespace doppler::checkpoints
