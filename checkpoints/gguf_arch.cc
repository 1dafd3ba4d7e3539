#include "checkpoints/gguf_arch.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace doppler::checkpoints {
namespace {

// Gemma 3's sandwich norms; its ffn_norm is the norm before the MLP, as in llama.
constexpr GgufNamePair kGemma3Names[] = {{"post_attention_norm", "post_attention_layernorm"},
                                         {"ffn_norm", "pre_feedforward_layernorm"},
                                         {"post_ffw_norm", "post_feedforward_layernorm"}};
// Phi-3's fused projections: attn_qkv rows [q | k | v], ffn_up rows [gate | up].
constexpr GgufNamePair kPhi3Names[] = {{"attn_qkv", "self_attn.qkv_proj"}, {"ffn_up", "mlp.gate_up_proj"}};

// Mixtral, which llama.cpp writes as llama with experts: the router and the stacked experts (w1
// gate, w3 up, w2 down).
constexpr GgufNamePair kLlamaNames[] = {{"ffn_gate_inp", "block_sparse_moe.gate"},
                                        {"ffn_gate_exps", "block_sparse_moe.experts.w1"},
                                        {"ffn_up_exps", "block_sparse_moe.experts.w3"},
                                        {"ffn_down_exps", "block_sparse_moe.experts.w2"}};
constexpr GgufMoe kMixtral = {.hf_class = "MixtralForCausalLM", .model_type = "mixtral", .experts = "block_sparse_moe.experts"};
constexpr GgufNamePair kQwen3MoeNames[] = {{"ffn_gate_inp", "mlp.gate"},
                                           {"ffn_gate_exps", "mlp.experts.gate_proj"},
                                           {"ffn_up_exps", "mlp.experts.up_proj"},
                                           {"ffn_down_exps", "mlp.experts.down_proj"}};
constexpr GgufMoe kQwen3Moe = {.hf_class = "Qwen3MoeForCausalLM",
                               .model_type = "qwen3_moe",
                               .experts = "mlp.experts",
                               .expert_width_key = true,
                               .always = true};

// GPT-OSS (llama.cpp's gpt-oss, LLM_ARCH_OPENAI_MOE): the norm before the MLP is
// post_attention_norm; the router has a bias; the converter splits HF's interleaved gate_up_proj
// into ffn_gate_exps and ffn_up_exps (their .bias too) and stores down_proj [in, out] transposed.
constexpr GgufNamePair kGptOssNames[] = {{"post_attention_norm", "post_attention_layernorm"},
                                         {"ffn_gate_inp", "mlp.router"},
                                         {"ffn_gate_exps", "mlp.experts.gate_proj"},
                                         {"ffn_up_exps", "mlp.experts.up_proj"},
                                         {"ffn_down_exps", "mlp.experts.down_proj"}};
constexpr GgufNamePair kGptOssWholeNames[] = {{"attn_sinks.weight", "self_attn.sinks"}};
constexpr GgufMoe kGptOss = {.hf_class = "GptOssForCausalLM",
                             .model_type = "gpt_oss",
                             .experts = "mlp.experts",
                             .expert_width_key = true,
                             .expert_width_required = true,
                             .always = true,
                             .biases = true,
                             .hf_gate_up_interleaved = true};

// GPT-OSS as llama.cpp runs it: its loader requires the sliding window (every even layer slides,
// its swa pattern of 2, which is also transformers' default for gpt_oss); the clamped SwiGLU's
// alpha 1.702 and limit 7 are fixed in its graph (the config's default swiglu_limit).
absl::Status GptOssConfig(const formats::GgufFile& f, nlohmann::json& j) {
  if (!j.contains("sliding_window")) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": gpt-oss.attention.sliding_window is missing or 0 (llama.cpp requires the window of gpt-oss's "
                     "sliding layers)"));
  }
  return absl::OkStatus();
}

// Qwen3-MoE as llama.cpp runs it: every layer a mixture, and the chosen experts' weights always
// renormalised (its qwen3moe graph fixes that; no key says otherwise).
absl::Status Qwen3MoeConfig(const formats::GgufFile& f, nlohmann::json& j) {
  (void)f;
  j["norm_topk_prob"] = true;
  return absl::OkStatus();
}

// Gemma 3's keys llama.cpp does not store: the layer pattern and the query scale it assumes.
absl::Status Gemma3Config(const formats::GgufFile& f, nlohmann::json& j) {
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
    {.gguf = "llama",
     .hf_class = "LlamaForCausalLM",
     .model_type = "llama",
     .hidden_act = "silu",
     .permuted_qk = true,
     .layer_names = kLlamaNames,
     .moe = &kMixtral},
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
    {.gguf = "qwen3moe",
     .hf_class = "Qwen3MoeForCausalLM",
     .model_type = "qwen3_moe",
     .hidden_act = "silu",
     .layer_names = kQwen3MoeNames,
     .extra_config = Qwen3MoeConfig,
     .moe = &kQwen3Moe},
    {.gguf = "gpt-oss",
     .hf_class = "GptOssForCausalLM",
     .model_type = "gpt_oss",
     .hidden_act = "silu",
     .sliding_window = true,
     .layer_names = kGptOssNames,
     .layer_whole_names = kGptOssWholeNames,
     .extra_config = GptOssConfig,
     .moe = &kGptOss},
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
    if (a.hf_class == hf_class || IsGgufMoeClass(a, hf_class)) return &a;
  }
  return nullptr;
}

bool IsGgufMoeClass(const GgufArch& arch, std::string_view hf_class) {
  return arch.moe != nullptr && arch.moe->hf_class == hf_class;
}

std::string GgufArchNames() {
  return absl::StrJoin(kArchs, ", ", [](std::string* out, const GgufArch& a) { absl::StrAppend(out, std::string(a.gguf)); });
}

}  // namespace doppler::checkpoints
