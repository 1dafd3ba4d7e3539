// Reader for HF config.json (decoder-only LMs). Accepts both RoPE spellings: the classic
// top-level rope_theta / rope_scaling / rope_local_base_freq and transformers 5's
// rope_parameters (one object, or one per layer type for gemma3).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace doppler::formats {

struct RopeScaling {
  std::string type = "default";  // "default", "linear", "llama3", "yarn", "longrope"
  float factor = 1.0f;
  float low_freq_factor = 1.0f, high_freq_factor = 4.0f;  // llama3
  int original_max_position_embeddings = 0;              // llama3, yarn, longrope
  // Multiplies cos and sin (yarn, longrope), resolved at parse time as transformers does: the
  // config's attention_factor, else the method's default from the factor and the contexts.
  float attention_factor = 1.0f;
  float beta_fast = 32.0f, beta_slow = 1.0f;  // yarn: the ramp's ends, in rotations
  bool truncate = true;                       // yarn: round the ramp's ends to whole dimensions
  std::vector<float> long_factor, short_factor;  // longrope: one divisor per frequency
};

struct RopeConfig {
  float theta = 10000.0f;
  RopeScaling scaling;
};

struct ModelConfig {
  std::string architecture;  // architectures[0], e.g. "LlamaForCausalLM"
  std::string model_type;    // "llama", "qwen2", "gemma3_text", ...
  int vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_layers = 0, num_heads = 0,
      num_kv_heads = 0, head_dim = 0;
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = false;
  int max_position_embeddings = 0;  // 0 when the config does not say
  std::string hidden_act = "silu";  // "silu", "gelu_pytorch_tanh", ... (gemma: hidden_activation)
  bool attention_bias = false;
  RopeConfig rope;                       // the global (full-attention) rope
  std::optional<RopeConfig> rope_local;  // gemma3's sliding layers, when the config gives one
  std::optional<int> sliding_window;
  std::vector<std::string> layer_types;  // transformers' "layer_types" if present
  std::optional<int> bos_token_id;
  std::vector<int> eos_token_ids;  // eos_token_id may be an int or a list
  nlohmann::json raw;              // the whole file, for family-specific keys
};

// Every error names the file and the key.
absl::StatusOr<ModelConfig> ReadHfConfig(const std::filesystem::path& config_json);
// The same, from already-parsed JSON; `source` names it in messages.
absl::StatusOr<ModelConfig> ParseHfConfig(const nlohmann::json& j, const std::string& source);

}  // namespace doppler::formats
