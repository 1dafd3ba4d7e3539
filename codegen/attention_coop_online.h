// The one-pass prefill attention on NVIDIA's cooperative-matrix units, for devices whose f32
// fragments keep the mma layout (TargetCaps::coop_accumulators_mma).
#pragma once

#include <cstdint>
#include <string>

#include "codegen/target_caps.h"

namespace doppler::codegen {

// The widest head it takes: its queries (as fragments), output sums and a chunk's scores stay in
// registers, which wider heads would spill.
inline constexpr int64_t kCoopOnlineMaxHeadDim = 128;

// Shared bytes for `subgroups` subgroups and chunks of `keys` keys: the staged chunk's keys and
// values (f16 rows padded by 8 values; the block's queries pass through the same space first) and
// each query's scale.
int64_t CoopOnlineSharedBytes(int64_t subgroups, int64_t keys, int64_t head_dim);

// main() and its shared arrays, for NSG subgroups, chunks of `keys` keys (16, 32 or 64) and heads
// of head_dim; it needs the attention prelude of the two-pass variant (attention_coop.h), subgroup
// arithmetic and shuffles.
std::string CoopOnlineAttentionMain(int64_t subgroups, int64_t keys, int64_t head_dim, bool sinks);

}  // namespace doppler::codegen
