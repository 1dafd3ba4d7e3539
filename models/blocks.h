// Building blocks shared by the decoder-only families: rope tables, the attention block with its
// KV cache, the gated MLP, the LM head, and the whole decoder (DecoderSpec). A family starts from
// StandardDecoder and states what differs, through the specs' fields.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/hf_config.h"
#include "graph/builder.h"
#include "models/architecture.h"

namespace doppler::models {

using graph::GraphBuilder;
using graph::ValueId;

// A const f32[context, rotary_dim/2, 2] of (cos, sin) of position × inv_freq, computed in float32
// as transformers does (the angle is a float32 product).
ValueId RopeTable(GraphBuilder& b, const std::string& name, const formats::RopeConfig& rope, int rotary_dim, int64_t context);

// A weight matrix [rows, cols] in the model's storage type.
ValueId Matrix(GraphBuilder& b, const std::string& name, int64_t rows, int64_t cols, const BuildOptions& o);
// Rows [row_offset, row_offset + rows) of the checkpoint matrix `source`, which the config says is
// [source_rows, cols] (a fused tensor such as Phi-3's qkv_proj), as a param of its own.
ValueId MatrixRows(GraphBuilder& b, const std::string& source, int64_t source_rows, int64_t row_offset, int64_t rows,
                   int64_t cols, const BuildOptions& o);
// A matrix [rows, cols] named `name` that lies inside a larger stored tensor (graph/param_slice.h),
// in the storage type the model gives that tensor.
ValueId MatrixFrom(GraphBuilder& b, const std::string& name, const graph::ParamSlice& slice, int64_t rows,
                   int64_t cols, const BuildOptions& o);
// A vector (norm weights, biases), kept in f32: it is small and read once per row.
ValueId Vector(GraphBuilder& b, const std::string& name, int64_t n);

// An RMSNorm: x / sqrt(mean(x²) + eps) * (w + offset). An empty weight name means "no norm".
struct NormSpec {
  std::string weight;
  double eps = 1e-6;
  double offset = 0.0;  // 1 for Gemma's (1 + w)
};

// Applies `norm` to x[T, width] (returns x unchanged when norm.weight is empty).
ValueId Norm(GraphBuilder& b, const NormSpec& norm, ValueId x, int64_t width, std::string_view label);

struct AttentionSpec {
  int64_t heads, kv_heads, head_dim;
  double scale;        // multiplies q·k
  int64_t window = 0;  // sliding window in positions, counting the query itself (0: full causal)
  std::string q, k, v, o;  // weight names
  // Optional parts; an empty name means absent.
  std::string q_bias, k_bias, v_bias, o_bias;  // added after the projections (Qwen2)
  // RMSNorms over head_dim applied to each head of q and k before rope (Qwen3, Gemma3); the
  // weights are [head_dim], with qk_norm_eps and qk_norm_offset.
  std::string q_norm, k_norm;
  double qk_norm_eps = 1e-6, qk_norm_offset = 0.0;
  // A checkpoint tensor holding the rows [q | k | v] (Phi-3's qkv_proj): q, k and v are then
  // row slices of it and the names q, k, v are unused.
  std::string qkv_fused;
  // A logit per head [heads] joining each softmax (GPT-OSS's attention sinks).
  std::string sinks;
};

// Self-attention of normalised input x[T, hidden]: projections, rope, cache writes, attention,
// output projection. Returns f32[T, hidden].
//
// The KV cache of a full-attention layer holds o.context rows. A sliding-window layer keeps only
// the window: its cache is a ring of min(context, window + max_step_tokens - 1) rows, position p
// living in row p % capacity (cache_write and attention both address it so).
ValueId AttentionBlock(GraphBuilder& b, const AttentionSpec& spec, ValueId x, int64_t hidden, ValueId rope_table,
                       int layer, const BuildOptions& o);

enum class Activation { kSilu, kGeluTanh };
// The MLP activation a config names (hidden_act / hidden_activation); others are an error.
absl::StatusOr<Activation> ParseActivation(const std::string& hidden_act);

struct MlpSpec {
  int64_t intermediate;
  std::string gate, up, down;  // weight names
  Activation act = Activation::kSilu;
  // A checkpoint tensor holding the rows [gate | up] (Phi-3's gate_up_proj): gate and up are then
  // row slices of it and their names are unused.
  std::string gate_up_fused;
};

// down(act(gate(x)) * up(x)).
ValueId GatedMlp(GraphBuilder& b, const MlpSpec& spec, ValueId x, int64_t hidden, const BuildOptions& o);

// Where an expert's matrix or bias lies in the checkpoint: a tensor of its own (named), or inside
// a tensor that stacks every expert's (a slice, graph/param_slice.h; `name` is then the param's own).
struct ExpertTensor {
  ExpertTensor(std::string tensor) : name(std::move(tensor)) {}  // NOLINT: a name is a whole tensor
  ExpertTensor(std::string param_name, graph::ParamSlice in) : name(std::move(param_name)), slice(std::move(in)) {}
  std::string name;
  std::optional<graph::ParamSlice> slice;
};

// GPT-OSS's gated activation of the experts (graph::ClampedSwiglu).
struct ClampedSwigluSpec {
  double alpha, limit;
};

// A mixture-of-experts MLP: a router picks top_k of `experts` gated MLPs for each token and sums
// their outputs weighted by the route weights. Each of gate, up and down is one weight of the
// experts' matrices stacked, expert e's rows after expert e - 1's: a checkpoint with a tensor per
// expert (HF) has them stacked at load (concat_rows); one that stores them stacked (GGUF's
// ffn_*_exps, BuildOptions::stacked_experts) is read as it is, under the stacked names.
struct MoeSpec {
  int64_t experts, top_k, intermediate;
  std::string router;       // [experts, hidden] weight: the gating logits
  std::string router_bias;  // optional [experts], added to the logits (GPT-OSS)
  std::string weighting;    // route_weights' weighting (graph/op.h)
  // Expert e's gate, up and down matrices ([intermediate, hidden], [hidden, intermediate]).
  std::function<ExpertTensor(int64_t e)> gate, up, down;
  // The names of the stacked weights ([experts*intermediate, hidden], [experts*hidden, intermediate]),
  // read in their place where the checkpoint stores them so.
  std::string gate_stacked, up_stacked, down_stacked;
  // Optional: expert e's biases of the gate, up and down products ([intermediate], [intermediate],
  // [hidden]), added to each product before the activation (down's before the route weight).
  std::function<ExpertTensor(int64_t e)> gate_bias, up_bias, down_bias;
  // The names of the stacked biases ([experts*intermediate], [experts*hidden]), read in their place
  // where the checkpoint stores the experts stacked.
  std::string gate_bias_stacked, up_bias_stacked, down_bias_stacked;
  Activation act = Activation::kSilu;  // act(gate) * up
  std::optional<ClampedSwigluSpec> clamped_swiglu;  // when set, the activation instead of act(gate) * up
};

// sum over the chosen experts e of weight_e * down_e(act(gate_e(x)) * up_e(x)) (with their biases).
ValueId MoeMlp(GraphBuilder& b, const MoeSpec& spec, ValueId x, int64_t hidden, const BuildOptions& o);

// The number of experts, experts per token and expert width a config gives (num_local_experts or
// num_experts; num_experts_per_tok; moe_intermediate_size, else intermediate_size); missing or
// out-of-range values are errors naming the key.
absl::StatusOr<MoeSpec> ConfigMoe(const formats::ModelConfig& c);
// The number of experts a config gives (num_local_experts or num_experts), 0 for a dense model
// (or a value ConfigMoe refuses).
int64_t ConfigExpertCount(const formats::ModelConfig& c);

// Final norm and LM head; sets the "logits" output (the runtime appends how the next token is chosen).
void LmHead(GraphBuilder& b, ValueId h, ValueId final_norm, double eps, double norm_offset, ValueId lm_head,
            const BuildOptions& o);

// One decoder layer:
//   h += post_attn_norm(attention(input_norm(h)))
//   h += post_mlp_norm(mlp(pre_mlp_norm(h)))
// Llama-style layers have no post norms; Gemma's "sandwich" layers have all four.
struct DecoderLayerSpec {
  NormSpec input_norm;
  AttentionSpec attn;
  bool local_rope = false;  // rope from DecoderSpec::rope_local (Gemma3's sliding layers)
  NormSpec post_attn_norm;  // optional
  NormSpec pre_mlp_norm;    // Llama's post_attention_layernorm
  MlpSpec mlp;
  std::optional<MoeSpec> moe;  // when set, the layer's MLP is this mixture of experts (mlp is unused)
  NormSpec post_mlp_norm;  // optional
};

// A decoder-only model: embedding, layers, final norm, LM head.
struct DecoderSpec {
  std::string embed = "model.embed_tokens.weight";
  double embed_scale = 1.0;  // multiplies the gathered embedding (Gemma: sqrt(hidden) as a float32)
  formats::RopeConfig rope;                       // the table "rope"
  std::optional<formats::RopeConfig> rope_local;  // the table "rope_local", for layers with local_rope
  std::vector<DecoderLayerSpec> layers;
  NormSpec final_norm;
  std::string lm_head;  // "" when tied to the embedding
};

// The Llama-style decoder a config describes, with HF weight names: pre-norm layers, scale
// 1/sqrt(head_dim), full causal attention, the config's activation, tied or untied head. A family
// starts from it and changes what differs.
absl::StatusOr<DecoderSpec> StandardDecoder(const formats::ModelConfig& c);

// The step graph of a decoder (input "ids"; output "logits").
absl::StatusOr<graph::Graph> BuildDecoder(const formats::ModelConfig& c, const DecoderSpec& spec, const BuildOptions& o);

// Family-specific keys of config.json (config.raw): absent or null gives `fallback`; a value of
// another type is an error naming the key.
absl::StatusOr<double> ConfigNumber(const formats::ModelConfig& c, const char* key, double fallback);
absl::StatusOr<bool> ConfigBool(const formats::ModelConfig& c, const char* key, bool fallback);
// An integer from 1 to `max` (a count, a period): anything else, fractions and values past any
// int64 included, is an error naming the key and the range.
absl::StatusOr<int64_t> ConfigCount(const formats::ModelConfig& c, const char* key, int64_t fallback, int64_t max);

// Gives every sliding-window layer its window (attn.window = config.sliding_window). Which layers
// slide: config.layer_types when the config has them ("sliding_attention" or "full_attention";
// anything else is an error), else those for which `by_default(layer)` is true, provided the
// config gives a sliding_window. A sliding layer without a sliding_window is an error.
absl::Status SetSlidingWindows(const formats::ModelConfig& c, const std::function<bool(int)>& by_default, DecoderSpec& d);

}  // namespace doppler::models
