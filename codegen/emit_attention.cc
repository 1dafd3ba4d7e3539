// Causal attention over the KV cache, in four variants of one family.
//
// subgroups (decode, where the device has subgroup arithmetic): one workgroup per (query head,
// token), up to 32 subgroups, each taking every NSG-th key with its own running max, sum and
// output (each lane owns DPL of the head's dimensions, consecutive ones where the head splits into
// quads a lane, else lane, lane + S, ...: a key's score is one subgroupAdd). A subgroup loads KPI
// keys and their values before it uses any, so its loads are in flight together; the subgroups'
// partial results are merged through shared memory at the end.
// A decode step has only heads × tokens workgroups, so each is wide. At one token, or with a row
// per sequence (no row reads another's keys), it also takes an appending attention
// (fuse-kv-append) whole: each workgroup computes its row's key and value, uses them for its own
// position, and the group's first head writes them to the caches.
// Where a step has few such workgroups (codegen/tuning/attention.h), a row's keys are split into
// runs of consecutive keys, a workgroup each (grid z; how many a row takes follows its context at
// run time, so a short one takes one): each run merges its subgroups into its max, sum and
// unnormalised output in the kernel's scratch, and the last of the row's runs to finish merges
// the runs and writes the output.
// Elsewhere lowering gives an appending attention its cache writes, then a plain attention.
//
// keys (batched decode steps of many rows and kv heads, with subgroup arithmetic and shuffles): one
// workgroup per (kv head, row), the group's query heads together; lanes take keys for the scores
// and dimensions for the values (codegen/attention_keys.h).
//
// token (decode, without subgroup arithmetic): one workgroup per (query head, token). Keys are
// visited in chunks of one key per invocation: each chunk's scores update a running max and sum,
// and every invocation rescales and accumulates the output dimensions it owns.
//
// block (prefill, buckets of 8 tokens or more): one workgroup per (query head, block of QB
// tokens), TPQ invocations per query. Each chunk of KC keys and their values is staged in shared
// memory once for the whole block; each invocation scores its query against its share of the
// chunk's keys, the query's invocations read the chunk's scores back for the running max and sum,
// and each accumulates its HD / TPQ output dimensions. K and V are read once per block of queries
// instead of once per query.
//
// coop (prefill buckets from kCoopMinRows rows over an f16 cache, on NVIDIA's cooperative-matrix
// units): blocks of 16 queries per subgroup against chunks of 16 keys as f16 fragments, in two
// passes over the keys (codegen/attention_coop.cc).
//
// Attention sinks (attr sinks: a logit per head joining each softmax as a key of value 0) start
// each running softmax as if that key had been seen: max = sink, sum = 1, no output. Where
// partial softmaxes are merged (the subgroups and keys variants', the coop variant's lane pairs) the sink
// joins the merge instead, so that it counts once.
//
// A row's position and its keys' cache rows come from codegen/step_rows.h (paged or not). The
// block and coop variants stage one range of keys for a block of queries, so they take one
// sequence's rows only; a step with a row per sequence takes keys, subgroups or token.
//
// Shared memory is independent of the KV length, so any context fits.
#include <algorithm>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/attention_coop.h"
#include "codegen/attention_coop_online.h"
#include "codegen/attention_keys.h"
#include "codegen/emitters.h"
#include "codegen/glsl_common.h"
#include "codegen/half_x.h"
#include "codegen/matmul.h"
#include "codegen/step_rows.h"
#include "codegen/tuning/attention.h"
#include "graph/attention_inputs.h"

namespace doppler::codegen {
namespace {
// The token variant's main(): see the file comment. Needs the prelude's q_value, load_kc, load_vc,
// wg_max, wg_sum and constants.
constexpr const char* kTokenMain = R"(
const uint DIMS_PER_INVOCATION = (HD + WG - 1u) / WG;
shared float s_q[HD];
shared float s_p[WG];
shared uint s_row[WG];  // cache offset of each key of the chunk

void main() {
  uint lid = gl_LocalInvocationID.x;
  uint h = gl_WorkGroupID.x;
  uint t = gl_WorkGroupID.y;
  if (t >= step.n_tokens) return;  // uniform across the workgroup
  uint p = row_position(t);
  uint first = first_key(p);
  uint kv_base = (h / GROUP) * HD;

  float ss = 0.0;
  for (uint d = lid; d < HD; d += WG) {
    s_q[d] = q_value(t, h * HD + d);
    ss += q_square(t, h * HD + d);
  }
#if QNORM
  ss = wg_sum(ss);
#endif
  float qs = q_scale(ss);
  for (uint d = lid; d < HD; d += WG) s_q[d] *= qs;
  barrier();

  float run_max = {{M0}};
  float run_sum = {{L0}};
  float acc[DIMS_PER_INVOCATION];
  [[unroll]] for (uint i = 0; i < DIMS_PER_INVOCATION; ++i) acc[i] = 0.0;

  for (uint chunk = first; chunk <= p; chunk += WG) {
    uint j = chunk + lid;
    float score = -3.0e38;
    uint row = cache_row(t, min(j, p), CAP) * KVW + kv_base;  // read only where j <= p
    if (j <= p) {
      score = 0.0;
      for (uint d = 0; d < HD; ++d) score += s_q[d] * load_kc(row + d);
    }
    float new_max = max(run_max, wg_max(score));
    float e = j <= p ? exp(score - new_max) : 0.0;
    float alpha = exp(run_max - new_max);
    run_sum = run_sum * alpha + wg_sum(e);
    run_max = new_max;
    s_p[lid] = e;
    s_row[lid] = row;
    barrier();
    uint count = min(WG, p + 1u - chunk);
    [[unroll]] for (uint i = 0; i < DIMS_PER_INVOCATION; ++i) {
      uint d = lid + i * WG;
      if (d < HD) {
        float a = acc[i] * alpha;
        for (uint jj = 0; jj < count; ++jj) a += s_p[jj] * load_vc(s_row[jj] + d);
        acc[i] = a;
      }
    }
    barrier();
  }
  [[unroll]] for (uint i = 0; i < DIMS_PER_INVOCATION; ++i) {
    uint d = lid + i * WG;
    if (d < HD) store_o(t * QW + h * HD + d, acc[i] / run_sum);
  }
}
)";

// The subgroups and keys variants' lanes over a head's dimensions: DPL of them a lane, for subgroups
// of at least MIN_SG lanes, of at most MAX_NSG subgroups a workgroup.
constexpr const char* kLaneDims = R"(
const uint MIN_SG = {{MIN_SG}}u, MAX_NSG = WG / MIN_SG, DPL = (HD + MIN_SG - 1u) / MIN_SG;
#define CONSEC {{CONSEC}}
// Dimension i of a lane's DPL: with CONSEC DPL consecutive ones, read as vectors of four (kq, vq
// view the caches so), else every S-th.
uint lane_dim(uint lane, uint i) { return CONSEC == 1 ? lane * DPL + i : lane + gl_SubgroupSize * i; }
)";

// The subgroups and keys variants' runs of a row's keys over workgroups (grid z): one for every
// SPLIT_KEYS keys a row sees, SPLITS at most (uniform across the workgroup, and across the row's
// workgroups; those past a row's runs return at once).
constexpr const char* kRowRuns = R"(
const uint SPLITS = {{SPLITS}}u, SPLIT_KEYS = {{SPLIT_KEYS}}u;
uint row_runs(uint t) {
  uint p = row_position(t);
  return min(SPLITS, (p - first_key(p) + SPLIT_KEYS) / SPLIT_KEYS);
}
// Run z of `runs` of the keys first .. p: begin to last.
void run_keys(uint first, uint p, uint runs, uint z, out uint begin, out uint last) {
  uint run = (p - first + runs) / runs;
  begin = first + z * run;
  last = min(begin + run - 1u, p);
}
#define SPLIT {{SPLIT}}
{{SPLIT_SCRATCH}})";

// The subgroups variant's main(): see the file comment. Needs the prelude's q_value, load_kc,
// load_vc and constants, kLaneDims and kRowRuns.
constexpr const char* kSubgroupsMain = R"(
const uint KPI = {{KPI}}u;
shared float s_q[HD];
shared float s_m[MAX_NSG], s_l[MAX_NSG];
shared float s_acc[MAX_NSG][HD];

// A subgroup's trip over the keys j, j + nsg, ..., j + (KPI - 1)·nsg of row t up to key `last`:
// their rows of the caches, the lane's dimensions (a key past `last` reads its row again). With
// APPEND the trip takes p's own key and value from shared memory, and does not read p's row, which
// a workgroup writes in this step: without pages it reads row p + 1 instead, which none writes;
// with pages (where p + 1 may have no page yet) it reads nothing.
void load_trip(uint t, uint j, uint p, uint last, uint kv_base, out float kd[KPI][DPL], out float vd[KPI][DPL]) {
  uint lane = gl_SubgroupInvocationID, nsg = gl_NumSubgroups;
  [[unroll]] for (uint u = 0u; u < KPI; ++u) {
    uint key = min(j + u * nsg, last);
    bool own = APPEND == 1 && key == p, skip = PAGED == 1 && own;
    uint row = cache_row(t, own && PAGED == 0 ? p + 1u : key, CAP) * KVW + kv_base;
#if CONSEC
    [[unroll]] for (uint i = 0u; i < DPL; i += 4u) {
      uint d = lane_dim(lane, i);
      bool read = d < HD && !skip;
      vec4 k4 = read ? load4_kq(row + d) : vec4(0.0), v4 = read ? load4_vq(row + d) : vec4(0.0);
      [[unroll]] for (uint e = 0u; e < 4u; ++e) { kd[u][i + e] = k4[e]; vd[u][i + e] = v4[e]; }
    }
#else
    [[unroll]] for (uint i = 0u; i < DPL; ++i) {
      uint d = lane_dim(lane, i);
      bool read = d < HD && !skip;
      kd[u][i] = read ? load_kc(row + d) : 0.0;
      vd[u][i] = read ? load_vc(row + d) : 0.0;
    }
#endif
  }
}

void main() {
  uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, z = gl_WorkGroupID.z;
  if (t >= step.n_tokens) return;  // uniform across the workgroup
  uint p = row_position(t);
  uint first = first_key(p);
  // This workgroup's run of the row's keys, begin to last (none where the runs end before z).
  uint runs = row_runs(t);
  if (z >= runs) return;  // uniform across the workgroup
  uint begin, last;
  run_keys(first, p, runs, z, begin, last);
  uint kv_base = (h / GROUP) * HD;
  uint lane = gl_SubgroupInvocationID, sg = gl_SubgroupID, nsg = gl_NumSubgroups;
  // The first trip's keys and values are loaded before anything else, so that they are in flight
  // with q's loads (a decode step over a short context has one trip). Later trips load their own:
  // loading the next trip's during one needs twice the registers, which with 1,024 invocations
  // (at most 64 registers each) measured slower on the H100 (Qwen3-0.6B, 128-wide heads).
  float kd[KPI][DPL], vd[KPI][DPL];
  if (begin + sg <= last) load_trip(t, begin + sg, p, last, kv_base, kd, vd);  // uniform across the subgroup
  // q, and with APPEND row t's new key and value for this kv head (at p),
  // loaded in one round; the heads' sums of squares (for their norms) reduced together: q's in
  // s_m, k's in s_l.
  float ss = 0.0, kss = 0.0;
  for (uint d = gl_LocalInvocationID.x; d < HD; d += WG) {
    s_q[d] = q_value(t, h * HD + d);
    ss += q_square(t, h * HD + d);
#if APPEND
    s_kn[d] = k_value(t, kv_base + d);
    s_vn[d] = load_vn(t * KVW + kv_base + d);
    kss += k_square(t, kv_base + d);
#endif
  }
#if QNORM
  ss = subgroupAdd(ss);
  if (subgroupElect()) s_m[sg] = ss;
#endif
#if APPEND && KNORM
  kss = subgroupAdd(kss);
  if (subgroupElect()) s_l[sg] = kss;
#endif
  barrier();  // s_q, s_kn, s_vn and the partial sums are written
#if QNORM
  ss = 0.0;
  for (uint g = 0u; g < nsg; ++g) ss += s_m[g];
#endif
  float qs = q_scale(ss);
#if APPEND
  // The key normalised and rotated as the k cache write does; the pairs rounded as the caches
  // store them (new_k, new_v) for the key loop. The workgroup of the group's first head also
  // writes them to the caches (its first run's), at p's row, which no workgroup reads in this step.
#if KNORM
  kss = 0.0;
  for (uint g = 0u; g < nsg; ++g) kss += s_l[g];
#endif
  put_new_pairs(kss, h % GROUP == 0u && z == 0u ? cache_row(t, p, CAP) * KVW + kv_base : ~0u);
#endif
#if QNORM || APPEND
  barrier();  // q's sums are read (s_m is reused below); with APPEND, the new pairs are rounded
#endif

  float qv[DPL], acc[DPL];
  [[unroll]] for (uint i = 0u; i < DPL; ++i) {
    uint d = lane_dim(lane, i);
    qv[i] = d < HD ? s_q[d] * qs : 0.0;
    acc[i] = 0.0;
  }
  float m = -3.0e38, l = 0.0;
  // Trips of keys j, j + nsg, ..., j + (KPI - 1)·nsg; every branch below is uniform across the
  // subgroup.
  for (uint j = begin + sg; j <= last; j += nsg * KPI) {
    if (j != begin + sg) load_trip(t, j, p, last, kv_base, kd, vd);
    float score[KPI];
    [[unroll]] for (uint u = 0u; u < KPI; ++u) {
      float part = 0.0;
      [[unroll]] for (uint i = 0u; i < DPL; ++i) {
        uint d = lane_dim(lane, i);
#if APPEND
        if (min(j + u * nsg, last) == p && d < HD) {  // the step's own key and value
          kd[u][i] = new_k(d);
          vd[u][i] = new_v(d);
        }
#endif
        part += qv[i] * kd[u][i];
      }
      score[u] = subgroupAdd(part);
    }
    float mx = m;
    [[unroll]] for (uint u = 0u; u < KPI; ++u) {
      if (j + u * nsg <= last) mx = max(mx, score[u]);
    }
    float alpha = exp(m - mx);
    l *= alpha;
    [[unroll]] for (uint i = 0u; i < DPL; ++i) acc[i] *= alpha;
    [[unroll]] for (uint u = 0u; u < KPI; ++u) {
      float e = j + u * nsg <= last ? exp(score[u] - mx) : 0.0;
      l += e;
      [[unroll]] for (uint i = 0u; i < DPL; ++i) acc[i] += e * vd[u][i];
    }
    m = mx;
  }
  if (subgroupElect()) {
    s_m[sg] = m;
    s_l[sg] = l;
  }
  [[unroll]] for (uint i = 0u; i < DPL; ++i) {
    uint d = lane_dim(lane, i);
    if (d < HD) s_acc[sg][d] = acc[i];
  }
  barrier();
  // A subgroup that had no key holds m = -3e38 and weighs nothing. The loops over the subgroups
  // are unrolled to the most there can be, so that their shared-memory reads are issued together.
  // Of several runs, each merges its subgroups without the sink, which joins the runs' merge.
  float mg = runs == 1u ? {{M0}} : -3.0e38;
  [[unroll]] for (uint g = 0u; g < MAX_NSG; ++g) {
    if (g < nsg) mg = max(mg, s_m[g]);
  }
  for (uint d = gl_LocalInvocationID.x; d < HD; d += WG) {
    float lg = runs == 1u ? {{MERGED_L0}} : 0.0, o_d = 0.0;
    [[unroll]] for (uint g = 0u; g < MAX_NSG; ++g) {
      if (g < nsg) {
        float w = exp(s_m[g] - mg);
        lg += w * s_l[g];
        o_d += w * s_acc[g][d];
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
  if (runs > 1u) merge_runs(t, h, 1u, runs);  // uniform across the workgroup
#endif
}
)";

// The subgroups and keys variants' runs (SPLITS > 1): each run's max, sum and unnormalised
// output in the kernel's scratch; the last of a row's runs to finish merges them with the sink and
// writes the output, and leaves the counter as it found it.
constexpr const char* kSplitScratch = R"(
layout(std430, set = 0, binding = {{SCRATCH}}) coherent buffer Buf_split { uint done[{{ROWS_HEADS}}]; float part[]; } split;
const uint RUN_FLOATS = HD + 2u;
// Row t's head h: its counter, and the first of its runs.
uint row_head(uint t, uint h) { return t * (QW / HD) + h; }
uint run_at(uint t, uint h, uint z) { return (row_head(t, h) * SPLITS + z) * RUN_FLOATS; }
void put_run(uint t, uint h, uint z, uint d, float m, float l, float o_d) {
  uint at = run_at(t, h, z);
  if (d == 0u) {
    split.part[at] = m;
    split.part[at + 1u] = l;
  }
  split.part[at + 2u + d] = o_d;
}
{{LAST_ARRIVAL}}
// Heads h0 .. h0 + heads - 1 of row t, whose runs count their arrivals at h0's counter. Each
// invocation takes dimensions of the heads and loads every run's max, sum and output there
// together (the loops unrolled to the most runs there can be, a run past `runs` reading the last
// one's again, weighed 0), so that the merge waits on one round of loads, not a round a run.
void merge_runs(uint t, uint h0, uint heads, uint runs) {
  if (!last_arrival()) return;
  for (uint e = gl_LocalInvocationID.x; e < heads * HD; e += WG) {
    uint h = h0 + e / HD, d = e % HD;
    float rm[SPLITS], rl[SPLITS], ro[SPLITS];
    [[unroll]] for (uint r = 0u; r < SPLITS; ++r) {
      uint at = run_at(t, h, min(r, runs - 1u));
      rm[r] = split.part[at];
      rl[r] = split.part[at + 1u];
      ro[r] = split.part[at + 2u + d];
    }
    float mg = {{M0}};
    [[unroll]] for (uint r = 0u; r < SPLITS; ++r) mg = max(mg, rm[r]);
    float lg = {{MERGED_L0}}, o_d = 0.0;
    [[unroll]] for (uint r = 0u; r < SPLITS; ++r) {
      float w = r < runs ? exp(rm[r] - mg) : 0.0;
      lg += w * rl[r];
      o_d += w * ro[r];
    }
    store_o(t * QW + h * HD + d, o_d / lg);
  }
  if (gl_LocalInvocationIndex == 0u) split.done[row_head(t, h0)] = 0u;
}
)";

// The block variant's main(): see the file comment. Needs the prelude's q_value, load_kc,
// load_vc and constants.
constexpr const char* kBlockMain = R"(
const uint TPQ = {{TPQ}}u, QB = WG / TPQ, KC = {{KC}}u, DPT = HD / TPQ;
shared float s_q[QB][HD];
shared float s_part[QB][TPQ];  // each query's invocations' sums of squares
shared float s_k[KC][HD + 1u];  // padded: invocations of one query read different rows
shared float s_v[KC][HD];
shared float s_p[QB][KC];

void main() {
  uint lid = gl_LocalInvocationID.x;
  uint h = gl_WorkGroupID.x;
  uint qi = lid / TPQ, sub = lid % TPQ;
  uint t0 = gl_WorkGroupID.y * QB;
  uint n = step.n_tokens;
  if (t0 >= n) return;  // uniform across the workgroup
  uint t = t0 + qi;
  bool live = t < n;
  uint p = row_position(min(t, n - 1u));  // a dead query shadows the last live one
  uint first = first_key(p);
  // Keys of the whole block: from the first query's first key to the last query's position.
  uint p0 = row_position(t0), p_last = row_position(min(t0 + QB, n) - 1u);
  uint block_first = first_key(p0);
  uint kv_base = (h / GROUP) * HD;

  for (uint e = lid; e < QB * HD; e += WG) {
    uint qq = e / HD, d = e % HD;
    s_q[qq][d] = t0 + qq < n ? q_value(t0 + qq, h * HD + d) : 0.0;
  }
  // Each query's scale: its invocations sum their share of the head's squares.
  float ss = 0.0;
  for (uint d = sub; d < HD; d += TPQ) ss += live ? q_square(t, h * HD + d) : 0.0;
  s_part[qi][sub] = ss;
  barrier();
  ss = 0.0;
  for (uint i = 0u; i < TPQ; ++i) ss += s_part[qi][i];
  float qs = q_scale(ss);
  [[unroll]] for (uint d = 0u; d < DPT; ++d) s_q[qi][sub * DPT + d] *= qs;
  float run_max = {{M0}}, run_sum = {{L0}};
  float acc[DPT];
  [[unroll]] for (uint i = 0u; i < DPT; ++i) acc[i] = 0.0;

  for (uint c0 = block_first; c0 <= p_last; c0 += KC) {
    barrier();  // the previous chunk's readers are done (and s_q is written)
    for (uint e = lid; e < KC * HD; e += WG) {
      uint j = e / HD, d = e % HD;
      uint row = cache_row(t0, min(c0 + j, p_last), CAP) * KVW + kv_base + d;
      bool in_range = c0 + j <= p_last;
      s_k[j][d] = in_range ? load_kc(row) : 0.0;
      s_v[j][d] = in_range ? load_vc(row) : 0.0;
    }
    barrier();
    for (uint j = sub; j < KC; j += TPQ) {
      uint key = c0 + j;
      float score = -3.0e38;
      if (key >= first && key <= p) {
        score = 0.0;
        for (uint d = 0u; d < HD; ++d) score += s_q[qi][d] * s_k[j][d];
      }
      s_p[qi][j] = score;
    }
    barrier();
    float chunk_max = -3.0e38;
    for (uint j = 0u; j < KC; ++j) chunk_max = max(chunk_max, s_p[qi][j]);
    float new_max = max(run_max, chunk_max);
    float alpha = exp(run_max - new_max);
    float chunk_sum = 0.0;
    [[unroll]] for (uint i = 0u; i < DPT; ++i) acc[i] *= alpha;
    for (uint j = 0u; j < KC; ++j) {
      uint key = c0 + j;
      float e = key >= first && key <= p ? exp(s_p[qi][j] - new_max) : 0.0;
      chunk_sum += e;
      [[unroll]] for (uint i = 0u; i < DPT; ++i) acc[i] += e * s_v[j][sub * DPT + i];
    }
    run_sum = run_sum * alpha + chunk_sum;
    run_max = new_max;
  }
  if (live) {
    [[unroll]] for (uint i = 0u; i < DPT; ++i) store_o(t * QW + h * HD + sub * DPT + i, acc[i] / run_sum);
  }
}
)";

// The appending kernel's inputs (bindings after the plain ones, in input order) and helpers:
// `float k_value(uint t, uint e)` (the new key as the k cache write computes it, before the head's
// 1 / rms), `k_square`, `k_scale`, `load_vn`, and `put_new`, `new_k`, `new_v`, `put_new_pairs` (below).
std::string AppendGlsl(const EmitContext& c, const graph::AttentionInputs& a, graph::DType cache_dtype) {
  const int64_t head_dim = c.node.attrs.Int("head_dim"), kvw = c.node.attrs.Int("kv_heads") * head_dim;
  auto binding = [&](graph::ValueId v) {  // input i is binding i + 2 (the output is 1)
    for (size_t i = 0; i < c.node.inputs.size(); ++i) {
      if (c.node.inputs[i] == v) return static_cast<uint32_t>(i + 2);
    }
    return uint32_t{0};
  };
  const bool k_norm = a.k_norm.has_value();
  std::string out = absl::StrCat("#define APPEND 1\n#define KNORM ", k_norm ? 1 : 0, "\n",
                                 FloatBuffer(binding(*a.k_new), "kn", graph::DType::kF32, true),
                                 FloatBuffer(binding(*a.v_new), "vn", graph::DType::kF32, true));
  if (k_norm) {
    absl::StrAppend(&out, HeadNormLoad(binding(*a.k_norm), c.g.node(*a.k_norm).type.dtype, "kn", head_dim,
                                       c.node.attrs.Float("k_norm_offset"), "knw", "load_knormed"));
  }
  absl::StrAppend(&out, a.rope ? RopeFunction("k_value", k_norm ? "load_knormed" : "load_kn", "table", kvw, head_dim,
                                              c.node.attrs.Str("style") == "neox")
                               : absl::StrCat("float k_value(uint t, uint e) { return kn[t * ", kvw, "u + e]; }\n"));
  absl::StrAppend(&out, "float k_square(uint t, uint e) { return ",
                  k_norm ? absl::StrCat("kn[t * ", kvw, "u + e] * kn[t * ", kvw, "u + e]") : "0.0", "; }\n",
                  "float k_scale(float sum_sq) { return ",
                  k_norm ? absl::StrCat("inversesqrt(sum_sq / ", head_dim, ".0 + ", FloatLiteral(c.node.attrs.Float("k_norm_eps")), ")")
                         : "1.0",
                  "; }\n");
  // `put_new(d, k0, k1, v0, v1, row)`: the new pair d, d + 1 as the caches store it, into shared
  // memory of the caches' type and into the caches at `row`, unless ~0; `new_k(d)`, `new_v(d)`:
  // element d as stored. (Rounded through shared memory, read back after a barrier: a round trip
  // through the type in registers, unpack(pack(x)), the driver may fold to x.)
  const bool f16 = cache_dtype == graph::DType::kF16;
  absl::StrAppend(&out, "shared float s_kn[HD], s_vn[HD];  // the new key and value as loaded\n",
                  Fill(R"(
shared {{T}} s_kc[HD / 2u], s_vc[HD / 2u];
void put_new(uint d, float k0, float k1, float v0, float v1, uint row) {
  {{T}} k = {{PACK}}(vec2(k0, k1)), v = {{PACK}}(vec2(v0, v1));
  s_kc[d >> 1] = k;
  s_vc[d >> 1] = v;
  if (row != ~0u) {
{{STORE}}  }
}
float new_k(uint d) { return {{UNPACK}}(s_kc[d >> 1])[d & 1u]; }
float new_v(uint d) { return {{UNPACK}}(s_vc[d >> 1])[d & 1u]; }
// The workgroup's share of put_new, once s_kn and s_vn hold the new key and value: each pair with
// the key scaled for its sum of squares `sum_sq`, into the caches at `row`, unless ~0.
void put_new_pairs(float sum_sq, uint row) {
  float ks = k_scale(sum_sq);
  for (uint d = 2u * gl_LocalInvocationID.x; d < HD; d += 2u * WG) {
    put_new(d, s_kn[d] * ks, s_kn[d + 1u] * ks, s_vn[d], s_vn[d + 1u], row);
  }
}
)",
                       {{"T", f16 ? "uint" : "vec2"},
                        {"PACK", f16 ? "packHalf2x16" : ""},
                        {"UNPACK", f16 ? "unpackHalf2x16" : ""},
                        {"STORE", f16 ? "    kc[(row + d) >> 1] = k;\n    vc[(row + d) >> 1] = v;\n"
                                      : "    kc[row + d] = k.x; kc[row + d + 1u] = k.y;\n"
                                        "    vc[row + d] = v.x; vc[row + d + 1u] = v.y;\n"}}));
  return out;
}

// Whether the graph's attention nodes differ in their window or their cache's rows (Gemma 3's
// windowed and global layers).
bool RingsDiffer(const graph::Graph& g) {
  std::optional<std::pair<int64_t, int64_t>> first;
  for (const graph::Node& n : g.nodes()) {
    if (n.kind != graph::OpKind::kAttention) continue;
    const std::pair<int64_t, int64_t> ring{n.attrs.Int("window"), g.node(n.inputs[1]).type.shape[0].value};
    if (first && *first != ring) return true;
    first = ring;
  }
  return false;
}

// WINDOW, the keys a query sees (0: all before it), and CAP, the cache's rows (without pages key j
// lives in row j % CAP, a ring; with pages CAP is the pool's rows and addresses nothing): compiled
// in, or in decode plans (one token, or a row per sequence) where the graph's attention nodes differ in
// them, the kernel's params, so that all of its layers run one pipeline. On the H100, Gemma-3-1B's
// four global layers in a pipeline of their own took 6.7-11.0 µs against 5.7-6.8 for the sliding
// ones; with one pipeline every layer took 5.6-6.9 µs and decode went from 948.6 / 950.1 to
// 954.5 / 958.3 tok/s. Prefill keeps them compiled in: its kernels find a row for every value they
// stage, and a division by a run-time CAP took Gemma-3-1B's pp512 from 34,900-35,200 to 31,203
// tok/s.
std::string RingGlsl(const EmitContext& c, Kernel& k) {
  const int64_t window = c.node.attrs.Int("window"), cap = c.input(1).type.shape[0].value;
  const bool decode = c.tokens == 1 || c.g.paging().row_per_sequence;
  if (!decode || !RingsDiffer(c.g)) return absl::StrCat("const uint WINDOW = ", window, "u, CAP = ", cap, "u;\n");
  k.params = {static_cast<uint32_t>(window), static_cast<uint32_t>(cap)};
  return absl::StrCat("layout(std430, set = 0, binding = ", ParamsBinding(k.args.size(), k.scratch_bytes > 0),
                      ") readonly buffer NodeParams { uint WINDOW; uint CAP; };\n");
}

// The keys a query sees at most, for the choice of runs: its window, or without pages the cache's
// rows; none (0) where the graph's attention nodes differ in them, whose decode kernels then share
// one pipeline (RingGlsl).
int64_t MaxKeys(const EmitContext& c) {
  if (RingsDiffer(c.g)) return 0;
  const int64_t window = c.node.attrs.Int("window");
  return window > 0 ? window : c.g.paging().paged() ? 0 : c.input(1).type.shape[0].value;
}

}  // namespace

// One attention dispatch: plain, or appending (where AttentionAppendsItself).
absl::StatusOr<Kernel> EmitAttention(const EmitContext& c) {
  const int64_t heads = c.node.attrs.Int("heads"), kv_heads = c.node.attrs.Int("kv_heads");
  const int64_t head_dim = c.node.attrs.Int("head_dim"), window = c.node.attrs.Int("window");
  const graph::DType cache_dtype = c.input(1).type.dtype;
  absl::StatusOr<tuning::AttentionConfig> chosen = tuning::ChooseAttention(
      c.caps, {.tokens = c.tokens, .heads = heads, .kv_heads = kv_heads, .head_dim = head_dim,
               .f16_cache = cache_dtype == graph::DType::kF16,
               .one_sequence = !c.g.paging().row_per_sequence,
               .max_keys = MaxKeys(c)});
  if (!chosen.ok()) return chosen.status();
  const tuning::AttentionConfig& config = *chosen;
  absl::StatusOr<InMatMulRules> rules = InMatMulRulesFromTune();
  if (!rules.ok()) return rules.status();
  const bool coop = config.variant == tuning::AttentionVariant::kCoop;
  const bool block = config.variant == tuning::AttentionVariant::kBlock;
  const bool subgroups = config.variant == tuning::AttentionVariant::kSubgroups;
  const bool keys = config.variant == tuning::AttentionVariant::kKeys;
  const uint32_t wg = config.wg;
  const int64_t splits = subgroups || keys ? config.splits : 1;
  Kernel k;
  k.family = "attention";
  k.config = config;
  k.variant = absl::StrCat(coop        ? (config.coop_online ? absl::StrCat("coop.online.k", config.coop_keys, ".") : "coop.")
                           : block     ? "block."
                           : subgroups ? "subgroups."
                           : keys      ? "keys."
                                       : "online_softmax.",
                           graph::Name(cache_dtype),
                           window > 0 ? ".window" : "", splits > 1 ? absl::StrCat(".runs", splits) : "");
  // A rope prologue (a table input) rotates q as it is loaded; a head norm prologue (its weight
  // after the table) normalises each head of q first: the weight as q is loaded, 1 / rms in
  // `q_head_scale` (with the softmax scale), which sums the head's squares (a few hundred values
  // at most, from cache) once per invocation, or per query in the block variant.
  const graph::AttentionInputs a = graph::AttentionInputsOf(c.node);
  const bool rope = a.rope.has_value(), norm = a.q_norm.has_value(), append = a.k_new.has_value();
  if (append && !subgroups && !keys) {
    return absl::InternalError("attention: only the subgroups and keys variants append keys themselves");
  }
  const std::string scale = FloatLiteral(c.node.attrs.Float("scale"));
  std::string q_value = "float q_value(uint t, uint e) { return q[t * QW + e]; }\n";
  // `float q_square(uint t, uint e)`: q[t, e]² for a head's norm (0 without one); `float
  // q_scale(float sum_sq)`: what multiplies a head's q given its sum of squares (the softmax scale,
  // times 1 / rms with a norm).
  std::string q_norm = absl::StrCat("#define QNORM 0\nfloat q_square(uint t, uint e) { return 0.0; }\n",
                                    "float q_scale(float sum_sq) { return ", scale, "; }\n");
  if (rope) {
    const std::string& style = c.node.attrs.Str("style");
    if (norm) absl::StrAppend(&k.variant, "+rms_norm");
    absl::StrAppend(&k.variant, "+rope.", style);
    q_value = absl::StrCat(FloatBuffer(5, "table", graph::DType::kF32, true),
                           norm ? HeadNormLoad(6, c.g.node(*a.q_norm).type.dtype, "q", head_dim,
                                               c.node.attrs.Float("norm_offset"))
                                : "",
                           RopeFunction("q_value", norm ? "load_normed" : "load_q", "table", heads * head_dim, head_dim,
                                        style == "neox"));
    if (norm) {
      q_norm = absl::StrCat("#define QNORM 1\n",
                            "float q_square(uint t, uint e) { return q[t * QW + e] * q[t * QW + e]; }\n",
                            "float q_scale(float sum_sq) { return ", scale, " * inversesqrt(sum_sq / ", head_dim,
                            ".0 + ", FloatLiteral(c.node.attrs.Float("norm_eps")), "); }\n");
    }
  }
  // Sinks: `sink_logit(h)` from their buffer (input i is binding i + 2).
  std::string sinks_glsl;
  if (a.sinks) {
    absl::StrAppend(&k.variant, "+sinks");
    sinks_glsl = absl::StrCat(FloatBuffer(static_cast<uint32_t>(c.node.inputs.size() + 1), "sinks", graph::DType::kF32, true),
                              "float sink_logit(uint h) { return sinks[h]; }\n");
  }
  k.args = {{c.node.id, true}};
  for (graph::ValueId in : c.node.inputs) k.args.push_back({in, append && (in == a.k_cache || in == a.v_cache)});
  // The softmax's start: no key yet, or the sink.
  const std::string m0 = a.sinks ? "sink_logit(h)" : "-3.0e38";
  const std::string merged_l0 = a.sinks ? "exp(sink_logit(h) - mg)" : "0.0";
  std::string split_scratch;
  if (splits > 1) {
    k.scratch_bytes = 4 * static_cast<uint64_t>(c.tokens * heads * (1 + splits * (head_dim + 2)));
    split_scratch = Fill(kSplitScratch, {{"SCRATCH", absl::StrCat(k.args.size() + 1)},
                                         {"ROWS_HEADS", absl::StrCat(c.tokens * heads)},
                                         // A keys workgroup takes a kv head's group of query heads.
                                         {"LAST_ARRIVAL", LastArrivalGlsl(absl::StrCat("split.done[row_head(gl_WorkGroupID.y, gl_WorkGroupID.x",
                                                                                       keys ? " * GROUP" : "", ")]"),
                                                                          "row_runs(gl_WorkGroupID.y)")},
                                         {"M0", m0},
                                         {"MERGED_L0", merged_l0}});
  }
  k.glsl = absl::StrCat(ShaderHeader(wg),
                        subgroups || keys ? "#extension GL_KHR_shader_subgroup_basic : enable\n"
                                            "#extension GL_KHR_shader_subgroup_arithmetic : enable\n"
                                          : "",
                        keys ? "#extension GL_KHR_shader_subgroup_shuffle : enable\n" : "",
                        coop ? "#extension GL_NV_cooperative_matrix : enable\n"
                               "#extension GL_KHR_memory_scope_semantics : enable\n"
                               "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : enable\n"
                               "#extension GL_KHR_shader_subgroup_basic : enable\n"
                             : "",
                        coop && config.coop_online ? "#extension GL_KHR_shader_subgroup_arithmetic : enable\n"
                                                     "#extension GL_KHR_shader_subgroup_shuffle : enable\n"
                                                   : "",
                        StepRowsGlsl(c.g.paging(), c.tokens),
                        OutputBuffer(1, "o", HalfX(c.g, c.node, c.caps, c.tokens, *rules)),
                        FloatBuffer(2, "q", graph::DType::kF32, true), FloatBuffer(3, "kc", cache_dtype, !append),
                        FloatBuffer(4, "vc", cache_dtype, !append),
                        config.consec || keys ? FloatQuadBuffer(3, "kq", cache_dtype, !append) : "",
                        config.consec ? FloatQuadBuffer(4, "vq", cache_dtype, !append) : "",
                        config.consec && keys ? FloatQuadRaw("vq", cache_dtype) : "",
                        config.key_ahead ? FloatQuadRaw("kq", cache_dtype) : "",
                        coop || block || subgroups ? "" : WorkgroupReductions(wg, false),
                        "const uint QW = ", heads * head_dim, "u;\n", q_value, Fill(R"(
const uint WG = {{WG}}u, HD = {{HD}}u, GROUP = {{GROUP}}u, KVW = {{KVW}}u;
#define PAGED {{PAGED}}
{{RING}}// The first key a query at position p sees (its window's start, or 0).
uint first_key(uint p) { return (WINDOW > 0u && p + 1u > WINDOW) ? p + 1u - WINDOW : 0u; }
)",
                                                                               {{"WG", absl::StrCat(wg)},
                                                                                {"HD", absl::StrCat(head_dim)},
                                                                                {"GROUP", absl::StrCat(heads / kv_heads)},
                                                                                {"KVW", absl::StrCat(kv_heads * head_dim)},
                                                                                {"RING", RingGlsl(c, k)},
                                                                                {"PAGED", c.g.paging().paged() ? "1" : "0"}}),
                        q_norm, append ? AppendGlsl(c, a, cache_dtype) : "#define APPEND 0\n", sinks_glsl,
                        Fill(coop        ? (config.coop_online ? CoopOnlineAttentionMain(config.coop_subgroups, config.coop_keys,
                                                                                  head_dim, a.sinks.has_value())
                                                                  : CoopAttentionMain(config.coop_subgroups, a.sinks.has_value()))
                             : block     ? kBlockMain
                             : subgroups ? absl::StrCat(kLaneDims, kRowRuns, kSubgroupsMain)
                             : keys      ? absl::StrCat(kLaneDims, kRowRuns, KeysAttentionMain())
                                         : kTokenMain,
                             {{"TPQ", absl::StrCat(config.tpq)},
                              {"KC", absl::StrCat(config.kc)},
                              {"MIN_SG", absl::StrCat(config.min_sg)},
                              {"KPI", absl::StrCat(config.kpi)},
                              {"KL", absl::StrCat(config.key_lanes)},
                              {"CONSEC", config.consec ? "1" : "0"},
                              {"KEY_AHEAD", config.key_ahead ? "1" : "0"},
                              {"SPLITS", absl::StrCat(splits)},
                              {"SPLIT_KEYS", absl::StrCat(config.split_keys)},
                              {"SPLIT", splits > 1 ? "1" : "0"},
                              {"SPLIT_SCRATCH", split_scratch},
                              {"M0", m0},
                              {"L0", a.sinks ? "1.0" : "0.0"},
                              {"MERGED_L0", merged_l0}}));
  if (append) absl::StrAppend(&k.variant, "+append");
  k.groups = {static_cast<uint32_t>(keys ? kv_heads : heads),
              coop    ? CeilDiv(c.tokens, kCoopAttentionTile * config.coop_subgroups)
              : block ? CeilDiv(c.tokens, config.qb)
                      : static_cast<uint32_t>(c.tokens),
              static_cast<uint32_t>(splits)};
  return k;
}

bool AttentionAppendsItself(const graph::Graph& g, const graph::Node& attention, const TargetCaps& caps,
                            int64_t tokens) {
  const graph::Paging& p = g.paging();
  return (tokens == 1 || (p.row_per_sequence && !p.rows_share_sequences)) && caps.subgroup_arithmetic &&
         attention.attrs.Int("head_dim") % 2 == 0;
}

}  // namespace doppler::codegen
