// GGUF tensors under their HF names, so a GGUF file can stand in for a safetensors checkpoint:
// the same graph (which names HF tensors) loads either.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"
#include "checkpoints/gguf_arch.h"
#include "formats/gguf/gguf_file.h"
#include "formats/weight_store.h"

namespace doppler::checkpoints {

// llama.cpp's names for an architecture's tensors <-> transformers' names, e.g.
// "blk.3.attn_q.weight" <-> "model.layers.3.self_attn.q_proj.weight". nullopt for names with no
// counterpart (e.g. rope_freqs.weight, which becomes part of the config).
std::optional<std::string> HfNameFromGguf(const GgufArch& arch, std::string_view gguf_name);
std::optional<std::string> GgufNameFromHf(const GgufArch& arch, std::string_view hf_name);

// An expert's own matrix in transformers' naming, "model.layers.N.<experts>.<e>.<part>.weight"
// (gguf_arch.h, GgufMoe::experts): the name of the layer's stacked weight,
// "model.layers.N.<experts>.<part>.weight" (which GgufNameFromHf maps to blk.N.ffn_*_exps), and e.
// nullopt for any other name.
std::optional<std::pair<std::string, int64_t>> StackedExpertOf(const GgufArch& arch, std::string_view hf_name);

// A WeightStore serving `file`'s tensors under HF names and in HF's form: llama's q/k rows put
// back in HF's order, Gemma's stored norm weights less their shift (see hf_names.cc), a layer's
// stacked experts blk.N.ffn_*_exps ([E, N, K]) as the [E*N, K] weight of the family's stacked name
// (gguf_arch.h, GgufMoe), their biases (GPT-OSS, [E, N]) as [E*N] vectors. Tensors
// with no HF name are not listed. Fails for architectures gguf_arch.h does not list, and when
// the head counts needed to undo the permutation are missing.
absl::StatusOr<std::unique_ptr<formats::WeightStore>> OpenHfNamedGguf(std::unique_ptr<formats::GgufFile> file);

}  // namespace doppler::checkpoints
