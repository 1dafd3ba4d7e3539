#include "models/gguf/gguf_arch.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace doppler::models {
namespace {

// Gemma 3's sandwich norms; its ffn_norm is the norm before the MLP, as in llama.
constexpr GgufNamePair kGemma3Names[] = {{"post_attention_norm", "post_attention_layernorm"},
                                         {"ffn_norm", "pre_feedforward_layernorm"},
                                         {"post_ffw_norm", "post_feedforward_layernorm"}};
// Phi-3's fused projections: attn_qkv rows [q | k | v], ffn_up rows [gate | up].
constexpr GgufNamePair kPhi3Names[] = {{"attn_qkv", "self_attn.qkv_proj"}, {"ffn_up", "mlp.gate_up_proj"}};

// Gemma 3's keys llama.cpp does not store: the layer pattern and the query scale it assumes.
absl::Status Gemma3Config(const GgufFile& f, nlohmann::json& j) {
  (void)f;
  const int64_t layers = j["num_hidden_layers"].get<int64_t>(), heads = j["num_attention_heads"].get<int64_t>();
  const int64_t hidden = j["hidden_size"].get<int64_t>();
  if (heads > 0) {  // (ParseHfConfig reports a bad head count)
    const int64_t head_dim = j.contains("head_dim") ? j["head_dim"].get<int64_t>() : hidden / heads;
    j["query_pre_attn_scalar"] = LlamaCppGemma3QueryScalar(layers, hidden, heads, head_dim);
  }
  j["sliding_window_pattern"] = kLlamaCppGemma3Pattern;
  return absl::OkStatus();
}

const GgufArch kArchs[] = {
    {.gguf = "llama", .hf_class = "LlamaForCausalLM", .model_type = "llama", .hidden_act = "silu", .permuted_qk = true},
    {.gguf = "qwen2", .hf_class = "Qwen2ForCausalLM", .model_type = "qwen2", .hidden_act = "silu"},
    {.gguf = "qwen3", .hf_class = "Qwen3ForCausalLM", .model_type = "qwen3", .hidden_act = "silu"},
    {.gguf = "gemma3",
     .hf_class = "Gemma3ForCausalLM",
     .model_type = "gemma3_text",
     .hidden_act = "gelu_pytorch_tanh",
     .norm_shift = 1.0f,
     .sliding_window = true,
     .layer_names = kGemma3Names,
     .extra_config = Gemma3Config},
    {.gguf = "phi3",
     .hf_class = "Phi3ForCausalLM",
     .model_type = "phi3",
     .hidden_act = "silu",
     .sliding_window = true,
     .layer_names = kPhi3Names},
};

}  // namespace

int64_t LlamaCppGemma3QueryScalar(int64_t layers, int64_t hidden, int64_t heads, int64_t head_dim) {
  return layers == 62 ? hidden / heads : head_dim;
}

const GgufArch* FindGgufArch(std::string_view gguf) {
  for (const GgufArch& a : kArchs) {
    if (a.gguf == gguf) return &a;
  }
  return nullptr;
}

const GgufArch* FindGgufArchOfHfClass(std::string_view hf_class) {
  for (const GgufArch& a : kArchs) {
    if (a.hf_class == hf_class) return &a;
  }
  return nullptr;
}

std::string GgufArchNames() {
  return absl::StrJoin(kArchs, ", ", [](std::string* out, const GgufArch& a) { absl::StrAppend(out, std::string(a.gguf)); });
}

}  // namespace doppler::models
