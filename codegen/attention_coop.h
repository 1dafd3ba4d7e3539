// The prefill attention variant on NVIDIA's cooperative-matrix units (VK_NV_cooperative_matrix).
#pragma once

#include <cstdint>
#include <string>

#include "codegen/kernel.h"

namespace doppler::codegen {

// Queries per subgroup and keys per chunk: one 16 × 16 fragment.
inline constexpr int64_t kCoopAttentionTile = 16;

// Subgroups per workgroup for heads of head_dim (4, or fewer where the staged queries, keys and
// values would not fit the device's shared memory); 0 when the variant cannot take the head
// (head_dim not a multiple of 16, or too wide for any). Fewer subgroups for more workgroups was
// slower on the H100: Gemma-3-1B's (4 heads of 256) prefill attention 6.4 ms with 2 subgroups,
// 9.4 ms with 1.
int64_t CoopAttentionSubgroups(const TargetCaps& caps, int64_t head_dim);

// What both coop variants' main() take from the cache and q: `load_chunk(c0, last, kv_base,
// values, kw, vw)`, an invocation's WPT words of the keys (and with `values` the values) of the
// chunk of keys c0 .. (0 past `last`), and `begin_block(h, q0, n, kv_base)`, the workgroup's block
// of queries, whose scales it puts in s_qs[BQ]. It needs WPT, BQ and s_qs declared first.
std::string CoopAttentionChunkGlsl();

// main() and its shared arrays, for NSG subgroups; it needs the attention prelude (q_value,
// q_square, q_scale, first_key, the f16 caches kc and vc as words, o, and the constants HD, GROUP, KVW, WINDOW,
// CAP, QW; with sinks, sink_logit).
std::string CoopAttentionMain(int64_t subgroups, bool sinks);

}  // namespace doppler::codegen
