// Prefill attention on cooperative-matrix units in one pass over the keys (an online softmax), for
// devices whose f32 fragments keep the mma layout. A workgroup takes NSG × 16 queries of one head;
// subgroup s owns queries 16s..16s+15, held as f16 fragments in registers for the whole pass. Keys
// and values come in chunks of KC, staged in shared memory as f16 (the cache's own values); each
// subgroup multiplies its queries by the chunk's keys into KC / 16 score fragments, which stay in
// registers: lane 4g + t holds rows g and g + 8 of each, so it masks its own scores (causal, window),
// and the four lanes of a row agree on the row's running maximum through two shuffles. The output
// sums (head_dim / 16 fragments) are rescaled by exp(old max − new max) row by row, element by
// element, the chunk's weights converted to f16 fragments in place and multiplied by the values;
// each lane adds its weights to its rows' sums, which the four lanes add up at the end. Against the
// two-pass variant (attention_coop.h), the scores are computed once, the queries are loaded into
// fragments once, and no score or output goes through shared memory. Products are of f16-rounded
// q, weights and cached keys and values, summed in f32.
#include "codegen/attention_coop_online.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "codegen/attention_coop.h"
#include "codegen/glsl_common.h"

namespace doppler::codegen {

int64_t CoopOnlineSharedBytes(int64_t subgroups, int64_t keys, int64_t head_dim) {
  return std::max(16 * subgroups, 2 * keys) * 2 * (head_dim + 8) + 4 * 16 * subgroups;
}

std::string CoopOnlineAttentionMain(int64_t subgroups, int64_t keys, int64_t head_dim, bool sinks) {
  // Registers for the next chunk: at most 32 words an invocation.
  const bool prefetch = keys * head_dim <= 32 * 32 * subgroups;
  return Fill(R"(
const uint NSG = {{NSG}}u, BQ = 16u * NSG, KC = {{KC}}u, KF = KC / 16u, HF = HD / 16u;
const uint HDW = (HD + 8u) / 2u;  // a staged row's words: rows padded by 8 values, 16 bytes apart in banks
// The chunk's keys (rows 0 .. KC - 1) and values (rows KC .. 2·KC - 1) as f16 pairs; the block's
// queries pass through the first rows before the first chunk.
shared uint skv[{{ROWS}}u * HDW];
shared float s_qs[BQ];

// A chunk moves in two steps: its keys' and values' f16 pairs into registers (0 past `last`), then
// from registers into skv. Where an invocation's share is small (PREFETCH), the next chunk's loads
// are in flight while this one's products run.
#define PREFETCH {{PREFETCH}}
const uint WPT = KC * HD / 2u / WG;  // words of a chunk's keys (and again of its values) an invocation moves
{{COMMON}}void store_chunk(uint kw[WPT], uint vw[WPT]) {
  [[unroll]] for (uint u = 0u; u < WPT; ++u) {
    uint e = gl_LocalInvocationID.x + WG * u;
    uint j = e / (HD / 2u), w = e % (HD / 2u);
    skv[j * HDW + w] = kw[u];
    skv[(KC + j) * HDW + w] = vw[u];
  }
}

// The column of element e of a lane's fragment (lane 4g + t; its row is g + 8·(e / 4)).
uint frag_col(uint t, uint e) { return 2u * t + (e & 1u) + 8u * ((e >> 1) & 1u); }

void main() {
  uint lid = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  uint h, q0, n, kv_base;
  if (!begin_block(h, q0, n, kv_base)) return;  // uniform across the workgroup
  for (uint e = lid; e < BQ * HD / 2u; e += WG) {
    uint r = e / (HD / 2u), d = 2u * (e % (HD / 2u));
    vec2 v = q0 + r < n ? vec2(q_value(q0 + r, h * HD + d), q_value(q0 + r, h * HD + d + 1u)) * s_qs[r] : vec2(0.0);
    skv[r * HDW + d / 2u] = packFloat2x16(f16vec2(v));
  }
  barrier();
  fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> qf[HF];
  [[unroll]] for (uint i = 0u; i < HF; ++i) coopMatLoadNV(qf[i], skv, sg * 16u * HDW + 8u * i, HDW, false);

  // Lane 4g + t: rows g and g + 8 of the subgroup's queries (row i of its two), and their keys.
  uint g = lane >> 2, t = lane & 3u;
  uint p[2], first[2];
  [[unroll]] for (uint i = 0u; i < 2u; ++i) {
    p[i] = row_position(min(q0 + sg * 16u + g + 8u * i, n - 1u));  // a dead query shadows the last live one
    first[i] = first_key(p[i]);
  }
  uint p_last = row_position(min(q0 + BQ, n) - 1u), block_first = first_key(row_position(q0));
  // The keys any of the subgroup's queries sees: chunks past them it skips.
  uint sg_first = subgroupMin(min(first[0], first[1])), sg_last = subgroupMax(max(p[0], p[1]));

  // Each row's running maximum and (this lane's share of) its sum; the sink joins them once.
  float m[2], l[2];
  [[unroll]] for (uint i = 0u; i < 2u; ++i) {
    m[i] = {{M0}};
    l[i] = t == 0u ? {{L0}} : 0.0;
  }
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[HF];
  [[unroll]] for (uint d = 0u; d < HF; ++d) acc[d] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
  uint kw[WPT], vw[WPT];
#if PREFETCH
  load_chunk(block_first, p_last, kv_base, true, kw, vw);
#endif
  for (uint c0 = block_first; c0 <= p_last; c0 += KC) {
    barrier();  // the previous chunk is used up (and the queries loaded)
#if PREFETCH
    store_chunk(kw, vw);
    barrier();
    load_chunk(c0 + KC <= p_last ? c0 + KC : c0, p_last, kv_base, true, kw, vw);
#else
    load_chunk(c0, p_last, kv_base, true, kw, vw);
    store_chunk(kw, vw);
    barrier();
#endif
    if (c0 <= sg_last && c0 + KC > sg_first) {  // uniform across the subgroup
      fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> s[KF];
      [[unroll]] for (uint f = 0u; f < KF; ++f) {
        s[f] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
        [[unroll]] for (uint i = 0u; i < HF; ++i) {
          fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> kf;
          coopMatLoadNV(kf, skv, 16u * f * HDW + 8u * i, HDW, true);  // key rows are the columns of Kᵀ
          s[f] = coopMatMulAddNV(qf[i], kf, s[f]);
        }
      }
      float mx[2] = float[2](m[0], m[1]);
      [[unroll]] for (uint f = 0u; f < KF; ++f) {
        [[unroll]] for (uint e = 0u; e < 8u; ++e) {
          uint i = e >> 2, key = c0 + 16u * f + frag_col(t, e);
          if (key >= first[i] && key <= p[i]) mx[i] = max(mx[i], s[f][e]);
        }
      }
      float alpha[2];
      [[unroll]] for (uint i = 0u; i < 2u; ++i) {
        mx[i] = max(mx[i], subgroupShuffleXor(mx[i], 1u));
        mx[i] = max(mx[i], subgroupShuffleXor(mx[i], 2u));
        alpha[i] = exp(m[i] - mx[i]);
        m[i] = mx[i];
        l[i] *= alpha[i];
      }
      [[unroll]] for (uint f = 0u; f < KF; ++f) {
        [[unroll]] for (uint e = 0u; e < 8u; ++e) {
          uint i = e >> 2, key = c0 + 16u * f + frag_col(t, e);
          // Rounded to f16 here, as the product takes it, so that the sums add what it multiplies
          // (the fragment's conversion below is then exact, whatever its rounding).
          float w = float(float16_t(key >= first[i] && key <= p[i] ? exp(s[f][e] - m[i]) : 0.0));
          l[i] += w;
          s[f][e] = w;
        }
      }
      [[unroll]] for (uint d = 0u; d < HF; ++d) {
        [[unroll]] for (uint e = 0u; e < 8u; ++e) acc[d][e] *= alpha[e >> 2];
      }
      [[unroll]] for (uint f = 0u; f < KF; ++f) {
        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> pw = fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>(s[f]);
        [[unroll]] for (uint d = 0u; d < HF; ++d) {
          fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> vf;
          coopMatLoadNV(vf, skv, (KC + 16u * f) * HDW + 8u * d, HDW, false);
          acc[d] = coopMatMulAddNV(pw, vf, acc[d]);
        }
      }
    }
  }
  [[unroll]] for (uint i = 0u; i < 2u; ++i) {
    l[i] += subgroupShuffleXor(l[i], 1u);
    l[i] += subgroupShuffleXor(l[i], 2u);
  }
  [[unroll]] for (uint d = 0u; d < HF; ++d) {
    [[unroll]] for (uint e = 0u; e < 8u; ++e) {
      uint i = e >> 2, row = q0 + sg * 16u + g + 8u * i;
      if (row < n) store_o(row * QW + h * HD + 16u * d + frag_col(t, e), acc[d][e] / l[i]);
    }
  }
}
)",
              {{"NSG", absl::StrCat(subgroups)},
               {"COMMON", CoopAttentionChunkGlsl()},
               {"KC", absl::StrCat(keys)},
               {"ROWS", absl::StrCat(std::max(16 * subgroups, 2 * keys))},
               {"PREFETCH", prefetch ? "1" : "0"},
               {"M0", sinks ? "sink_logit(h)" : "-3.0e38"},
               {"L0", sinks ? "1.0" : "0.0"}});
}

}  // namespace doppler::codegen
