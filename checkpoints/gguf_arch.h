// The architectures doppler reads from and writes to GGUF, as llama.cpp's converter writes them:
// one entry per general.architecture holding everything that differs between families (the HF
// class, tensor names, q/k row order, stored norm weights, family-specific keys). Adding a GGUF
// architecture is adding an entry here, once its family exists in models/.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "formats/gguf/gguf_file.h"
#include "nlohmann/json.hpp"

namespace doppler::checkpoints {

struct GgufNamePair {
  std::string_view gguf, hf;  // within a layer: "blk.N.<gguf>" <-> "model.layers.N.<hf>"
};

// A mixture-of-experts family as llama.cpp stores it: each layer's router as blk.N.ffn_gate_inp and
// its experts' matrices stacked into blk.N.ffn_gate_exps, ffn_up_exps and ffn_down_exps (ggml dims
// [K, N, E]: the E matrices of [N, K] back to back), which doppler reads as one [E*N, K] weight
// under the family's stacked name (models/blocks.h, MoeSpec). transformers stores one matrix per
// expert: "model.layers.N.<experts>.<e>.<part>.weight", stacked under "<experts>.<part>".
struct GgufMoe {
  std::string_view hf_class, model_type;  // config.json of a file with experts
  std::string_view experts;               // the experts' stem within a layer ("block_sparse_moe.experts")
  // llama.cpp reads the experts' width from {arch}.expert_feed_forward_length (when absent:
  // feed_forward_length / expert_used_count); otherwise feed_forward_length is their width.
  bool expert_width_key = false;
  // llama.cpp requires that key (no default width).
  bool expert_width_required = false;
  // Every layer is a mixture (llama.cpp requires {arch}.expert_count > 0); otherwise the file has
  // experts only when {arch}.expert_count > 0 and is the dense family when not.
  bool always = false;
  // The router and the stacked experts have biases: ffn_gate_inp.bias [E], ffn_{gate,up}_exps.bias
  // [E, width], ffn_down_exps.bias [E, hidden] (outermost first), read as the stacked names' .bias.
  bool biases = false;
  // The HF checkpoint stores each layer's experts already stacked, gate and up interleaved in one
  // tensor (GPT-OSS: gguf/gpt_oss_experts.h splits them for the file), not one tensor per expert.
  bool hf_gate_up_interleaved = false;
};

struct GgufArch {
  std::string_view gguf;        // general.architecture
  std::string_view hf_class;    // config.json architectures[0]
  std::string_view model_type;  // config.json model_type
  std::string_view hidden_act;  // llama.cpp fixes each family's activation; the file does not say
  // llama.cpp's llama converter interleaves each head's q/k rows for its pairwise rope
  // (hf_names.cc); the other families run llama.cpp's NEOX rope on HF's row order.
  bool permuted_qk = false;
  // Gemma: the converter stores every "*norm.weight" as w + 1 and llama.cpp multiplies by it as
  // is; doppler's Gemma graph computes (1 + w), so the reader subtracts this and the writer adds it.
  float norm_shift = 0.0f;
  // llama.cpp reads {arch}.attention.sliding_window for this architecture (and the family decides
  // which layers slide); for the others a window cannot be written.
  bool sliding_window = false;
  // Layer tensors named otherwise than in the common table (these take precedence).
  std::span<const GgufNamePair> layer_names;
  // Whole layer tensor names, suffix included, where the HF name has no .weight (GPT-OSS's sinks).
  std::span<const GgufNamePair> layer_whole_names;
  // Keys of this family beyond the common ones, written into the equivalent config.json; null
  // when there are none.
  absl::Status (*extra_config)(const formats::GgufFile& f, nlohmann::json& config) = nullptr;
  // The mixture-of-experts family stored under this architecture, if any (llama: Mixtral).
  const GgufMoe* moe = nullptr;
};

// What llama.cpp assumes of a Gemma 3 file, which has no keys for it: every 6th layer is global,
// the others slide; queries are scaled by 1/sqrt(head size), or 1/sqrt(hidden / heads) for the
// 62-layer 27B model (the query_pre_attn_scalar it implies is returned).
constexpr int kLlamaCppGemma3Pattern = 6;
int64_t LlamaCppGemma3QueryScalar(int64_t layers, int64_t hidden, int64_t heads, int64_t head_dim);

// The entry for a general.architecture, or for a config.json class (a dense or a mixture-of-experts
// one); null when there is none.
const GgufArch* FindGgufArch(std::string_view gguf);
const GgufArch* FindGgufArchOfHfClass(std::string_view hf_class);
// Whether `hf_class` is `arch`'s mixture-of-experts family.
bool IsGgufMoeClass(const GgufArch& arch, std::string_view hf_class);
// "llama, qwen2, ..." (for messages).
std::string GgufArchNames();

}  // namespace doppler::checkpoints
