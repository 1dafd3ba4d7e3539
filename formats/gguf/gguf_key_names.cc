#include "formats/gguf/gguf_key_names.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace doppler::formats {
namespace {

// config.json's name -> the GGUF key after "{arch}.".
constexpr std::pair<const char*, const char*> kKeys[] = {
    {"num_hidden_layers", "block_count"},
    {"hidden_size", "embedding_length"},
    {"intermediate_size", "feed_forward_length"},
    {"num_attention_heads", "attention.head_count"},
    {"num_key_value_heads", "attention.head_count_kv"},
    {"head_dim", "attention.key_length"},
    {"max_position_embeddings", "context_length"},
    {"vocab_size", "vocab_size"},
    {"rms_norm_eps", "attention.layer_norm_rms_epsilon"},
    {"sliding_window", "attention.sliding_window"},
    {"num_local_experts", "expert_count"},
    {"num_experts", "expert_count"},
    {"num_experts_per_tok", "expert_used_count"},
    {"moe_intermediate_size", "expert_feed_forward_length"},
};

}  // namespace

std::string GgufKeyOfHfKey(const std::string& hf_key, const std::string& arch) {
  for (const auto& [hf, gguf] : kKeys) {
    if (hf_key == hf) return absl::StrCat(arch, ".", gguf);
  }
  return hf_key;
}

absl::Status InGgufTerms(const absl::Status& status, const std::string& arch) {
  if (status.ok()) return status;
  std::string message(status.message());
  for (const auto& [hf, gguf] : kKeys) {
    // Quoted keys, and the bare names in explanations such as "... divide num_attention_heads (8)".
    message = absl::StrReplaceAll(message, {{absl::StrCat("'", hf, "'"), absl::StrCat("'", arch, ".", gguf, "'")},
                                            {absl::StrCat(" ", hf, " "), absl::StrCat(" ", arch, ".", gguf, " ")},
                                            {absl::StrCat(" ", hf, ")"), absl::StrCat(" ", arch, ".", gguf, ")")}});
  }
  return absl::Status(status.code(), message);
}

}  // namespace doppler::formats
