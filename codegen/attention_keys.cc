// The keys variant's main() (codegen/attention_keys.h). A subgroup's trip over the keys is a pass
// of KPP = MIN_SG / KL keys: each lane loads its dimensions of every key's value of the pass and
// its KL-th of its own key, so that all of the pass's loads are in flight together (the values,
// unconverted, still in flight while it scores); it scores its share against every query of the
// group (the queries broadcast from shared memory), the key's KL lanes add theirs, each head's
// running maximum is one subgroupMax a pass; the weights go through shared memory, and each lane
// adds the pass's values, weighted, into its dimensions of every head's output.
#include "codegen/attention_keys.h"

namespace doppler::codegen {

int64_t KeysAttentionSharedBytes(int64_t wg, int64_t min_subgroup, int64_t key_lanes, int64_t group, int64_t head_dim) {
  const int64_t max_nsg = wg / min_subgroup, keys = wg / key_lanes;
  // s_q, s_qs, s_e, s_m and s_l, s_part, s_acc; then an appending kernel's new key and value as
  // loaded and as stored (codegen/emit_attention.cc's AppendGlsl).
  return 4 * (group * head_dim + group + keys * group + 2 * max_nsg * group + max_nsg +
              max_nsg * group * head_dim) +
         16 * head_dim;
}

const char* KeysAttentionMain() {
  return R"(
const uint KL = {{KL}}u, KPP = MIN_SG / KL, KQ = HD / (4u * KL);  // lanes a key, keys a pass, quads a lane's share
#define KEY_AHEAD {{KEY_AHEAD}}
shared vec4 s_q[GROUP * HD / 4u];     // the group's queries as loaded, head by head
shared float s_qs[GROUP];             // each head's scale
shared float s_e[MAX_NSG * KPP * GROUP];  // each subgroup's pass: its keys' weights, key by key
shared float s_m[MAX_NSG * GROUP], s_l[MAX_NSG * GROUP], s_part[MAX_NSG];
shared float s_acc[MAX_NSG * GROUP * HD];
#if !APPEND
float new_k(uint d) { return 0.0; }
float new_v(uint d) { return 0.0; }
#endif
vec4 new_k4(uint d) { return vec4(new_k(d), new_k(d + 1u), new_k(d + 2u), new_k(d + 3u)); }
vec4 new_v4(uint d) { return vec4(new_v(d), new_v(d + 1u), new_v(d + 2u), new_v(d + 3u)); }

void main() {
  uint kh = gl_WorkGroupID.x, t = gl_WorkGroupID.y, z = gl_WorkGroupID.z;
  if (t >= step.n_tokens) return;  // uniform across the workgroup
  uint p = row_position(t);
  uint first = first_key(p);
  // This workgroup's run of the row's keys, begin to last (none where the runs end before z).
  uint runs = row_runs(t);
  if (z >= runs) return;  // uniform across the workgroup
  uint begin, last;
  run_keys(first, p, runs, z, begin, last);
  uint kv_base = kh * HD, h0 = kh * GROUP;  // the kv head's columns, the group's first query head
  uint lid = gl_LocalInvocationID.x, lane = gl_SubgroupInvocationID, sg = gl_SubgroupID, nsg = gl_NumSubgroups;
  uint lanes = subgroupAdd(1u);  // this subgroup's (the last may be partial)

  for (uint e = lid; e < GROUP * HD; e += WG) s_q[e >> 2][e & 3u] = q_value(t, h0 * HD + e);
  float kss = 0.0;
#if APPEND
  for (uint d = lid; d < HD; d += WG) {
    s_kn[d] = k_value(t, kv_base + d);
    s_vn[d] = load_vn(t * KVW + kv_base + d);
    kss += k_square(t, kv_base + d);
  }
#if KNORM
  kss = subgroupAdd(kss);
  if (subgroupElect()) s_part[sg] = kss;
#endif
#endif
  // Each head's scale from its sum of squares (with a norm), a subgroup a head.
  for (uint g = sg; g < GROUP; g += nsg) {
    float ss = 0.0;
    for (uint d = lane; d < HD; d += lanes) ss += q_square(t, (h0 + g) * HD + d);
    ss = subgroupAdd(ss);
    if (subgroupElect()) s_qs[g] = q_scale(ss);
  }
  barrier();  // s_q, s_qs, s_kn, s_vn and the partial sums are written
#if APPEND
  // The new key normalised and rotated as the k cache write does, rounded as the caches store it;
  // the run that holds p (the last, or where a tune leaves the last run empty the one before) writes
  // it into the caches at p's row, which no other workgroup reads in this step, and takes it as
  // new_k and new_v.
#if KNORM
  kss = 0.0;
  for (uint g = 0u; g < nsg; ++g) kss += s_part[g];
#endif
  put_new_pairs(kss, begin <= p && last == p ? cache_row(t, p, CAP) * KVW + kv_base : ~0u);
  barrier();  // the new pairs are rounded
#endif

  float qs[GROUP], m[GROUP], l[GROUP], acc[GROUP][DPL];
  [[unroll]] for (uint g = 0u; g < GROUP; ++g) {
    qs[g] = s_qs[g];
    m[g] = -3.0e38;
    l[g] = 0.0;
    [[unroll]] for (uint i = 0u; i < DPL; ++i) acc[g][i] = 0.0;
  }
  // The lane's key of a pass and its share of it (lanes past KPP keys, in subgroups wider than
  // MIN_SG, score nothing); the subgroup's keys in s_e.
  uint kq = lane / KL, part = lane % KL, slot = sg * KPP;
#if KEY_AHEAD
  // The lane's share of its key of the next pass, as stored, loaded during the pass before, so that
  // a pass's scores wait on no load of their own (past the run's last key: that key's row, never
  // scored).
  RAW4_kq k_next[KQ];
  uint k_row = cache_row(t, min(begin + sg * KPP + kq, last), CAP) * KVW + kv_base;
  [[unroll]] for (uint i = 0u; i < KQ; ++i) k_next[i] = raw4_kq(k_row + 4u * (i * KL + part));
#endif
  // Passes over keys base .. base + KPP - 1; every branch on base is uniform across the subgroup.
  for (uint base = begin + sg * KPP; base <= last; base += nsg * KPP) {
    // Past the run's last key: its value again, weighed 0; p's own, where APPEND, taken from the
    // workgroup's copy.
#if CONSEC
    // As stored (a quad's f16 pairs), converted where the weights multiply them, past the barrier:
    // converted as loaded, they made each pass wait on its values' loads before its scores
    // (bench/RESULTS.md, "fourteenth session": the attention a third faster at 32 and 64 rows).
    RAW4_vq v[KPP][DPL / 4u];
#else
    float v[KPP][DPL];
#endif
    [[unroll]] for (uint j = 0u; j < KPP; ++j) {
      uint vkey = min(base + j, last), vrow = cache_row(t, vkey, CAP) * KVW + kv_base;
#if CONSEC
      [[unroll]] for (uint i = 0u; i < DPL; i += 4u) v[j][i >> 2] = raw4_vq(vrow + min(lane_dim(lane, i), HD - 4u));
#else
      bool vown = APPEND == 1 && vkey == p;
      [[unroll]] for (uint i = 0u; i < DPL; ++i) {
        uint d = lane_dim(lane, i);
        v[j][i] = d >= HD ? 0.0 : vown ? new_v(d) : load_vc(vrow + d);
      }
#endif
    }
    uint key = min(base + kq, last);
    bool live = base + kq <= last && kq < KPP, own = APPEND == 1 && key == p;  // p's own row is not read
#if KEY_AHEAD
    RAW4_kq k_pass[KQ] = k_next;
    k_row = cache_row(t, min(base + nsg * KPP + kq, last), CAP) * KVW + kv_base;
    [[unroll]] for (uint i = 0u; i < KQ; ++i) k_next[i] = raw4_kq(k_row + 4u * (i * KL + part));
#else
    uint row = cache_row(t, key, CAP) * KVW + kv_base;
#endif
    float s[GROUP];
    [[unroll]] for (uint g = 0u; g < GROUP; ++g) s[g] = 0.0;
    [[unroll]] for (uint i = 0u; i < KQ; ++i) {
      uint d = 4u * (i * KL + part);  // a key's KL lanes read adjacent quads
#if KEY_AHEAD
      vec4 k4 = own ? new_k4(d) : unraw4_kq(k_pass[i]);
#else
      vec4 k4 = own ? new_k4(d) : load4_kq(row + d);
#endif
      [[unroll]] for (uint g = 0u; g < GROUP; ++g) s[g] += dot(s_q[(g * HD + d) >> 2], k4);
    }
    [[unroll]] for (uint g = 0u; g < GROUP; ++g) {
      [[unroll]] for (uint w = 1u; w < KL; w <<= 1) s[g] += subgroupShuffleXor(s[g], w);
      float score = live ? s[g] * qs[g] : -3.0e38;
      float mx = max(m[g], subgroupMax(score));
      float alpha = exp(m[g] - mx), e = live ? exp(score - mx) : 0.0;
      l[g] = l[g] * alpha + (part == 0u ? e : 0.0);
      [[unroll]] for (uint i = 0u; i < DPL; ++i) acc[g][i] *= alpha;
      m[g] = mx;
      if (part == 0u && kq < KPP) s_e[(slot + kq) * GROUP + g] = e;
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    [[unroll]] for (uint j = 0u; j < KPP; ++j) {
#if CONSEC
      bool vown = APPEND == 1 && min(base + j, last) == p;
      float vj[DPL];
      [[unroll]] for (uint i = 0u; i < DPL; i += 4u) {
        uint d = lane_dim(lane, i);
        vec4 v4 = d >= HD ? vec4(0.0) : vown ? new_v4(d) : unraw4_vq(v[j][i >> 2]);
        [[unroll]] for (uint c = 0u; c < 4u; ++c) vj[i + c] = v4[c];
      }
#else
      float vj[DPL] = v[j];
#endif
      [[unroll]] for (uint g = 0u; g < GROUP; ++g) {
        float e = s_e[(slot + j) * GROUP + g];
        [[unroll]] for (uint i = 0u; i < DPL; ++i) acc[g][i] += e * vj[i];
      }
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();  // the pass's weights are read before the next pass writes its own
  }

  [[unroll]] for (uint g = 0u; g < GROUP; ++g) {
    l[g] = subgroupAdd(l[g]);
    if (subgroupElect()) {
      s_m[sg * GROUP + g] = m[g];
      s_l[sg * GROUP + g] = l[g];
    }
    [[unroll]] for (uint i = 0u; i < DPL; ++i) {
      uint d = lane_dim(lane, i);
      if (d < HD) s_acc[(sg * GROUP + g) * HD + d] = acc[g][i];
    }
  }
  barrier();
  // A subgroup that had no key holds m = -3e38 and weighs nothing. Of several runs, each merges
  // its subgroups without the sink, which joins the runs' merge.
  for (uint e = lid; e < GROUP * HD; e += WG) {
    uint g = e / HD, d = e % HD, h = h0 + g;
    float mg = runs == 1u ? {{M0}} : -3.0e38;
    [[unroll]] for (uint s = 0u; s < MAX_NSG; ++s) {
      if (s < nsg) mg = max(mg, s_m[s * GROUP + g]);
    }
    float lg = runs == 1u ? {{MERGED_L0}} : 0.0, o_d = 0.0;
    [[unroll]] for (uint s = 0u; s < MAX_NSG; ++s) {
      if (s < nsg) {
        float w = exp(s_m[s * GROUP + g] - mg);
        lg += w * s_l[s * GROUP + g];
        o_d += w * s_acc[(s * GROUP + g) * HD + d];
      }
    }
#if SPLIT
    if (runs > 1u) {
      put_run(t, h, z, d, mg, lg, o_d);
      continue;
    }
#endif
    store_o(t * QW + h * HD + d, o_d / lg);
  }
#if SPLIT
  if (runs > 1u) merge_runs(t, h0, GROUP, runs);  // uniform across the workgroup
#endif
}
)";
}

}  // namespace doppler::codegen
