// Prefill attention on cooperative-matrix units. A workgroup takes NSG × 16 queries of one head;
// subgroup s owns queries 16s..16s+15. Keys and values come in chunks of 16, staged in shared
// memory as f16 (the cache's own values). The scores of a chunk are one 16 × 16 fragment per
// subgroup: Q · Kᵀ over head_dim / 16 products of f16 fragments summed in f32.
//
// Two passes over the keys, so that the output stays in accumulator fragments (whose layout across
// lanes is opaque, so they cannot be rescaled row by row as an online softmax would need): the
// first finds each query's maximum score (and the head's sink logit, where it has one), the second
// adds exp(score − max) · V into the accumulators and the weights into each query's sum (and
// exp(sink − max) once). Scores pass through shared memory, where
// each lane takes half a row of the fragment (the causal and window masks, the max, the exp);
// the weights go back as f16 for the P · V product. Products are of f16-rounded q, weights and
// cached keys and values, summed in f32. Each chunk is read into registers while the previous one's
// products run.
#include "codegen/attention_coop.h"

#include "absl/strings/str_cat.h"
#include "codegen/glsl_common.h"

namespace doppler::codegen {
namespace {

// Shared bytes for NSG subgroups: queries and one chunk of keys and values (f16 rows padded by 8
// values), each subgroup's score fragment (f32), weights (f16) and lane pairs, each query's scale.
int64_t SharedBytes(int64_t subgroups, int64_t head_dim) {
  const int64_t row = 2 * (head_dim + 8), tile = kCoopAttentionTile;
  return subgroups * tile * row + 2 * tile * row + subgroups * (tile * tile * 4 + tile * 24 * 2 + tile * 4 + 32 * 4);
}

}  // namespace

std::string CoopAttentionChunkGlsl() {
  return R"(void load_chunk(uint c0, uint last, uint kv_base, bool values, out uint kw[WPT], out uint vw[WPT]) {
  [[unroll]] for (uint u = 0u; u < WPT; ++u) {
    uint e = gl_LocalInvocationID.x + WG * u;
    uint j = e / (HD / 2u), d = 2u * (e % (HD / 2u));
    uint at = (cache_row(0u, min(c0 + j, last), CAP) * KVW + kv_base + d) / 2u;  // one sequence: table 0
    bool in_range = c0 + j <= last;
    kw[u] = in_range ? kc[at] : 0u;
    vw[u] = values && in_range ? vc[at] : 0u;
  }
}
// The workgroup's head h, first query q0, the step's tokens n and the head's kv offset in a cache
// row; false where the block holds no query (uniform across the workgroup), else each query's
// scale (the softmax's, times 1 / rms where the head has a norm) in s_qs, after a barrier.
bool begin_block(out uint h, out uint q0, out uint n, out uint kv_base) {
  h = gl_WorkGroupID.x;
  q0 = gl_WorkGroupID.y * BQ;
  n = step.n_tokens;
  kv_base = (h / GROUP) * HD;
  if (q0 >= n) return false;
  for (uint r = gl_LocalInvocationID.x; r < BQ; r += WG) {
    float ss = 0.0;
    if (QNORM != 0 && q0 + r < n) {
      for (uint d = 0u; d < HD; ++d) ss += q_square(q0 + r, h * HD + d);
    }
    s_qs[r] = q_scale(ss);
  }
  barrier();
  return true;
}
)";
}

int64_t CoopAttentionSubgroups(const TargetCaps& caps, int64_t head_dim) {
  if (head_dim % kCoopAttentionTile != 0) return 0;
  for (int64_t nsg = 4; nsg >= 1; nsg /= 2) {
    if (SharedBytes(nsg, head_dim) <= caps.max_shared_memory) return nsg;
  }
  return 0;
}

std::string CoopAttentionMain(int64_t subgroups, bool sinks) {
  return Fill(R"(
const uint NSG = {{NSG}}u, BQ = 16u * NSG, HDP = HD + 8u, PS = 24u;
shared float16_t sq[BQ * HDP];   // the block's queries, scaled (and normalised, rotated)
shared float16_t sk[16u * HDP];  // a chunk of keys
shared float16_t sv[16u * HDP];  // and their values
shared float sf[NSG * 256u];     // per subgroup: a 16 x 16 score (or output) fragment
shared float16_t sp[NSG * 16u * PS];  // per subgroup: the chunk's weights
shared float s_qs[BQ];
shared float s_pair[NSG * 32u];  // a lane's value for the other lane of its row

// The max (or sum) of v over the two lanes that share a row.
float pair_reduce(uint sg, uint lane, float v, bool take_max) {
  s_pair[sg * 32u + lane] = v;
  subgroupMemoryBarrierShared();
  subgroupBarrier();
  float other = s_pair[sg * 32u + (lane ^ 1u)];
  subgroupBarrier();
  return take_max ? max(v, other) : v + other;
}

// A chunk moves in two steps, so that the next chunk's loads are in flight while this one's
// products run: its keys' (and with `values` its values') f16 pairs into registers (0 past
// `last`), then from registers into sk and sv.
const uint WPT = 8u * HD / WG;  // words of a chunk's keys (and again of its values) per invocation
{{COMMON}}void store_chunk(uint kw[WPT], uint vw[WPT], bool values) {
  [[unroll]] for (uint u = 0u; u < WPT; ++u) {
    uint e = gl_LocalInvocationID.x + WG * u;
    uint j = e / (HD / 2u), d = 2u * (e % (HD / 2u));
    f16vec2 kv = unpackFloat2x16(kw[u]);
    sk[j * HDP + d] = kv.x;
    sk[j * HDP + d + 1u] = kv.y;
    if (values) {
      f16vec2 vv = unpackFloat2x16(vw[u]);
      sv[j * HDP + d] = vv.x;
      sv[j * HDP + d + 1u] = vv.y;
    }
  }
}

// This subgroup's 16 x 16 scores for the staged chunk, into its sf fragment. Two accumulators take
// alternate 16-wide slices of the head, so that wide heads are not one chain of dependent products.
void chunk_scores(uint sg) {
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> s[2];
  s[0] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
  s[1] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
  [[unroll]] for (uint i = 0u; i < HD / 16u; ++i) {
    fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a, b;
    coopMatLoadNV(a, sq, sg * 16u * HDP + 16u * i, HDP, false);
    coopMatLoadNV(b, sk, 16u * i, HDP, true);  // key rows are the columns of Kᵀ
    s[i & 1u] = coopMatMulAddNV(a, b, s[i & 1u]);
  }
  coopMatStoreNV(s[0] + s[1], sf, sg * 256u, 16u, false);
  subgroupMemoryBarrierShared();
  subgroupBarrier();
}

void main() {
  uint lid = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  uint h, q0, n, kv_base;
  if (!begin_block(h, q0, n, kv_base)) return;  // uniform across the workgroup
  for (uint e = lid; e < BQ * HD; e += WG) {
    uint r = e / HD, d = e % HD;
    sq[r * HDP + d] = float16_t(q0 + r < n ? q_value(q0 + r, h * HD + d) * s_qs[r] : 0.0);
  }

  // Lane `lane` takes row r (a query) and columns 8·side.. of its subgroup's fragments.
  uint r = lane >> 1, side = lane & 1u;
  uint p = row_position(min(q0 + sg * 16u + r, n - 1u));  // a dead query shadows the last live one
  uint first = first_key(p);
  uint p0 = row_position(q0), p_last = row_position(min(q0 + BQ, n) - 1u);
  uint block_first = first_key(p0);

  float m = -3.0e38;
  uint kw[WPT], vw[WPT];
  load_chunk(block_first, p_last, kv_base, false, kw, vw);  // the maxima need no values
  for (uint c0 = block_first; c0 <= p_last; c0 += 16u) {
    barrier();  // the previous chunk is used up (and sq written)
    store_chunk(kw, vw, false);
    barrier();
    load_chunk(c0 + 16u <= p_last ? c0 + 16u : c0, p_last, kv_base, false, kw, vw);
    chunk_scores(sg);
    [[unroll]] for (uint u = 0u; u < 8u; ++u) {
      uint col = 8u * side + u, key = c0 + col;
      if (key >= first && key <= p) m = max(m, sf[sg * 256u + r * 16u + col]);
    }
  }
  m = pair_reduce(sg, lane, m, true);
{{SINK_MAX}}
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[HD / 16u];
  [[unroll]] for (uint i = 0u; i < HD / 16u; ++i) acc[i] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
  float l = 0.0;
  load_chunk(block_first, p_last, kv_base, true, kw, vw);
  for (uint c0 = block_first; c0 <= p_last; c0 += 16u) {
    barrier();
    store_chunk(kw, vw, true);
    barrier();
    load_chunk(c0 + 16u <= p_last ? c0 + 16u : c0, p_last, kv_base, true, kw, vw);
    chunk_scores(sg);
    [[unroll]] for (uint u = 0u; u < 8u; ++u) {
      uint col = 8u * side + u, key = c0 + col;
      float w = key >= first && key <= p ? exp(sf[sg * 256u + r * 16u + col] - m) : 0.0;
      l += w;
      sp[(sg * 16u + r) * PS + col] = float16_t(w);
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> pa;
    coopMatLoadNV(pa, sp, sg * 16u * PS, PS, false);
    [[unroll]] for (uint i = 0u; i < HD / 16u; ++i) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> vb;
      coopMatLoadNV(vb, sv, 16u * i, HDP, false);
      acc[i] = coopMatMulAddNV(pa, vb, acc[i]);
    }
  }
  l = pair_reduce(sg, lane, l, false);
{{SINK_SUM}}
  uint t = q0 + sg * 16u + r;
  [[unroll]] for (uint i = 0u; i < HD / 16u; ++i) {
    coopMatStoreNV(acc[i], sf, sg * 256u, 16u, false);
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    if (t < n) {
      [[unroll]] for (uint u = 0u; u < 8u; ++u) {
        uint col = 8u * side + u;
        store_o(t * QW + h * HD + 16u * i + col, sf[sg * 256u + r * 16u + col] / l);
      }
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
  }
}
)",
              {{"NSG", absl::StrCat(subgroups)},
               {"COMMON", CoopAttentionChunkGlsl()},
               // A sink joins each query's maximum and sum once, after the lane pairs merged theirs.
               {"SINK_MAX", sinks ? "  m = max(m, sink_logit(h));\n" : ""},
               {"SINK_SUM", sinks ? "  l += exp(sink_logit(h) - m);\n" : ""}});
}

}  // namespace doppler::codegen
