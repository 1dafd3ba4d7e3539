// Building blocks shared by the decoder-only families: rope tables, the attention block with its
// KV cache, the gated MLP, and the LM head. A family composes these and states what differs.
#pragma once

#include <cstdint>
#include <string>

#include "graph/builder.h"
#include "models/architecture.h"
#include "models/hf_config.h"

namespace doppler::models {

using graph::GraphBuilder;
using graph::ValueId;

// A const f32[context, rotary_dim/2, 2] of (cos, sin) of position × inv_freq, computed in float32
// as transformers does (the angle is a float32 product).
ValueId RopeTable(GraphBuilder& b, const std::string& name, const RopeConfig& rope, int rotary_dim, int64_t context);

// A weight matrix [rows, cols] in the model's storage type.
ValueId Matrix(GraphBuilder& b, const std::string& name, int64_t rows, int64_t cols, const BuildOptions& o);
// A vector (norm weights), kept in f32: it is small and read once per row.
ValueId Vector(GraphBuilder& b, const std::string& name, int64_t n);

struct AttentionSpec {
  int64_t heads, kv_heads, head_dim;
  double scale;        // multiplies q·k
  int64_t window = 0;  // sliding window in positions (0: full causal)
  std::string q, k, v, o;  // weight names
};

// Self-attention of normalised input x[T, hidden]: projections, rope, cache writes, attention,
// output projection. Returns f32[T, hidden].
ValueId AttentionBlock(GraphBuilder& b, const AttentionSpec& spec, ValueId x, int64_t hidden, ValueId rope_table,
                       int layer, const BuildOptions& o);

// down(silu(gate(x)) * up(x)).
ValueId GatedMlp(GraphBuilder& b, ValueId x, int64_t hidden, int64_t intermediate, const std::string& gate,
                 const std::string& up, const std::string& down, const BuildOptions& o);

// Final norm, LM head and argmax; sets the "logits" and "next_token" outputs.
void LmHead(GraphBuilder& b, ValueId h, ValueId final_norm, double eps, double norm_offset, ValueId lm_head,
            const BuildOptions& o);

}  // namespace doppler::models
