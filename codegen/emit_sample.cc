// Sampling on the GPU: recording recent tokens, the repeat penalty, and the draw itself. The steps
// and the random generator are those of graph/sampling.h, so the interpreter is the oracle.
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/glsl_common.h"
#include "codegen/step_rows.h"

namespace doppler::codegen {
namespace {

// SampleUniform of graph/sampling.cc, in GLSL (uint arithmetic wraps the same way).
constexpr char kUniform[] = R"(
float sample_uniform(uint seed, uint position) {
  uint state = (seed ^ (position * 0x9E3779B9u)) * 747796405u + 2891336453u;
  uint word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
  word = (word >> 22u) ^ word;
  return float(word >> 8u) * (1.0 / 16777216.0);
}
)";

}  // namespace

absl::StatusOr<Kernel> EmitRecordTokens(const EmitContext& c) {
  constexpr uint32_t kWorkgroup = 64;
  const int64_t ring = c.input(0).type.shape[0].value;
  Kernel k;
  k.family = "record_tokens";
  k.variant = "ring";
  k.glsl = absl::StrCat(ShaderHeader(kWorkgroup), StepRowsGlsl(c.g.paging(), c.tokens), IntBuffer(1, "history", false), IntBuffer(2, "ids", true), Fill(R"(
void main() {
  uint t = gl_GlobalInvocationID.x;
  if (t >= step.n_tokens) return;
  history[row_position(t) % {{R}}u] = ids[t];
}
)",
                                                                                                                 {{"R", absl::StrCat(ring)}}));
  k.args = {{c.node.inputs[0], true}, {c.node.inputs[1], false}};
  k.groups = {CeilDiv(c.tokens, kWorkgroup), 1, 1};
  return k;
}

absl::StatusOr<Kernel> EmitRepeatPenalty(const EmitContext& c) {
  constexpr uint32_t kWorkgroup = 256;
  const int64_t vocab = c.node.type.shape[1].value, ring = c.input(1).type.shape[0].value;
  Kernel k;
  k.family = "repeat_penalty";
  k.variant = "ring";
  // Each workgroup loads the ring once; each invocation then checks its token against it.
  k.glsl = absl::StrCat(ShaderHeader(kWorkgroup), StepRowsGlsl(c.g.paging(), c.tokens), FloatBuffer(1, "y", graph::DType::kF32, false),
                        FloatBuffer(2, "x", graph::DType::kF32, true), IntBuffer(3, "history", true), Fill(R"(
shared int s_recent[{{R}}];

void main() {
  uint last = row_position(step.n_tokens - 1u);
  for (uint j = gl_LocalInvocationID.x; j < {{R}}u; j += {{WG}}u) {
    // Ring slot j holds position q = the latest position <= last with q % R == j, if q >= 0.
    uint back = (last % {{R}}u + {{R}}u - j) % {{R}}u;
    s_recent[j] = back <= last ? history[j] : -1;
  }
  barrier();
  uint i = gl_GlobalInvocationID.x;
  if (i >= {{V}}u) return;
  float v = x[i];
  for (uint j = 0u; j < {{R}}u; ++j) {
    if (s_recent[j] == int(i)) {
      v = v > 0.0 ? v * {{INV_PENALTY}} : v * {{PENALTY}};  // graph::Penalize
      break;
    }
  }
  y[i] = v;
}
)",
                                                                                                       {{"R", absl::StrCat(ring)},
                                                                                                        {"WG", absl::StrCat(kWorkgroup)},
                                                                                                        {"V", absl::StrCat(vocab)},
                                                                                                        {"PENALTY", FloatLiteral(c.node.attrs.Float("penalty"))},
                                                                                                        {"INV_PENALTY", FloatLiteral(1.0 / c.node.attrs.Float("penalty"))}}));
  k.args = {{c.node.id, true}, {c.node.inputs[0], false}, {c.node.inputs[1], false}};
  k.groups = {CeilDiv(vocab, kWorkgroup), 1, 1};
  return k;
}

// One workgroup. Three passes over the row find what top-k keeps: the maximum (and each
// invocation's), then how many values reach the k-th largest of the maxima of 256 groups of
// invocations — at least k values do, so the k kept ones are among them — then, where they fit a
// list in shared memory, those values. The thresholds, the sum and the draw then come from the list
// (for each entry, the values at or above it, and the weight before it in index order). Otherwise
// (top-k off, a k over 256, more ties than the list holds) the general path finds each threshold
// by building the float's ordered key bit by bit (32 counting or mass passes over the row) and
// draws from contiguous chunks of the row, one per invocation, in index order. On lavapipe a
// 151,936-entry row with run's defaults (top-k 40, top-p 0.95, min-p 0.05) took 23.0 ms on the
// general path and 2.1 ms through the list.
absl::StatusOr<Kernel> EmitSample(const EmitContext& c) {
  if (c.node.attrs.Float("temperature") <= 0.0) {
    absl::StatusOr<Kernel> greedy = EmitArgmax(c);
    if (greedy.ok()) greedy->family = "sample", greedy->variant = "greedy";
    return greedy;
  }
  const uint32_t wg = WidestPowerOfTwoWorkgroup(c.caps, 1024);
  // The list's entries (index, value, weight: 12 bytes) in what the reductions, the maxima and the
  // offsets leave of the shared memory.
  const int64_t spare = static_cast<int64_t>(c.caps.max_shared_memory) - 8 * int64_t{wg} - 2048;
  int64_t cap = 64;
  while (cap * 2 <= 2048 && cap * 2 * 12 <= spare) cap *= 2;
  const int64_t vocab = c.input(0).type.shape[1].value;
  const int64_t top_k = c.node.attrs.Int("top_k");
  Kernel k;
  k.family = "sample";
  k.variant = absl::StrCat("list", cap);
  // Shared-memory tree reductions on every device: the top-k/top-p thresholds keep one summation order.
  k.glsl = absl::StrCat(ShaderHeader(wg), StepRowsGlsl(c.g.paging(), c.tokens), IntBuffer(1, "token", false),
                        FloatBuffer(2, "x", graph::DType::kF32, true), WorkgroupReductions(wg, false), kUniform, Fill(R"(
const uint WG = {{WG}}u, V = {{V}}u, CHUNK = (V + WG - 1u) / WG, CAP = {{CAP}}u;
const uint TOP_K = {{TOP_K}}u, GROUPS = min(256u, WG), GROUP = WG / GROUPS;
const float INV_T = {{INV_T}}, TOP_P = {{TOP_P}}, MIN_P = {{MIN_P}};
#define NEG_INF uintBitsToFloat(0xFF800000u)
const bool USE_TOP_K = TOP_K > 0u && TOP_K < V;
shared float s_prefix[WG];  // the invocations' maxima, the list's offsets, the general path's chunk sums
shared float s_target;
shared uint s_owner;
shared uint s_idx[CAP];  // the list: index, value (y = x / T) and weight exp(y - m) of each entry
shared float s_y[CAP], s_w[CAP];

// FOR_EACH_Y(BODY) runs BODY for each of invocation lid's values of the row, in index order: its
// index i (lid, lid + WG, ...) and y = x[i] / T. They are loaded RUN at a time, together: a loop
// that waits on one load per trip is bound by its latency.
const uint RUN = 8u;
void load_run(uint base, out float ys[RUN]) {
  [[unroll]] for (uint u = 0u; u < RUN; ++u) ys[u] = x[min(base + u * WG, V - 1u)] * INV_T;
}
#define FOR_EACH_Y(BODY)                                     \
  for (uint base_ = lid; base_ < V; base_ += RUN * WG) {     \
    float ys_[RUN];                                          \
    load_run(base_, ys_);                                    \
    [[unroll]] for (uint u_ = 0u; u_ < RUN; ++u_) {          \
      uint i = base_ + u_ * WG;                              \
      float y = ys_[u_];                                     \
      if (i < V) { BODY }                                    \
    }                                                        \
  }

uint key_of(float f) {
  uint b = floatBitsToUint(f);
  return (b & 0x80000000u) != 0u ? ~b : b | 0x80000000u;
}

// Whether entry e survives the thresholds and min-p with a weight to draw.
bool kept(uint e, float threshold) { return s_y[e] >= threshold && s_w[e] >= MIN_P && s_w[e] > 0.0; }

// The draw from the list of n entries (every value at or above the top-k threshold among them):
// the top-k and top-p thresholds, min-p, and the first index in index order at which the running
// kept weight passes the target. Maxima and minima are workgroup reductions (indices are exact
// as floats).
void draw_from_list(uint n, uint lid) {
  // The top-k threshold: the largest value with at least TOP_K listed values at or above it.
  float best = NEG_INF;
  for (uint e = lid; e < n; e += WG) {
    uint at_least = 0u;
    for (uint f = 0u; f < n; ++f) at_least += s_y[f] >= s_y[e] ? 1u : 0u;
    if (at_least >= TOP_K) best = max(best, s_y[e]);
  }
  float threshold = wg_max(best);
  float z = 0.0;
  for (uint e = lid; e < n; e += WG) z += s_y[e] >= threshold ? s_w[e] : 0.0;
  z = wg_sum(z);
  if (TOP_P < 1.0) {
    // The largest kept value whose mass at or above it reaches top_p of z.
    best = NEG_INF;
    for (uint e = lid; e < n; e += WG) {
      if (s_y[e] < threshold) continue;
      float mass = 0.0;
      for (uint f = 0u; f < n; ++f) mass += s_y[f] >= s_y[e] ? s_w[f] : 0.0;
      if (mass >= TOP_P * z) best = max(best, s_y[e]);
    }
    threshold = max(threshold, wg_max(best));
  }
  float total = 0.0;
  for (uint e = lid; e < n; e += WG) total += kept(e, threshold) ? s_w[e] : 0.0;
  float target = sample_uniform({{SEED}}u, row_position(step.n_tokens - 1u)) * wg_sum(total);
  float first = NEG_INF, last = NEG_INF;  // -index of the first entry past the target; last kept index
  for (uint e = lid; e < n; e += WG) {
    if (!kept(e, threshold)) continue;
    float before = 0.0;
    for (uint f = 0u; f < n; ++f) before += s_idx[f] < s_idx[e] && kept(f, threshold) ? s_w[f] : 0.0;
    if (before + s_w[e] > target) first = max(first, -float(s_idx[e]));
    last = max(last, float(s_idx[e]));
  }
  first = wg_max(first);
  last = wg_max(last);
  if (lid == 0u) token[0] = int(first > NEG_INF ? -first : max(last, 0.0));
}

// The general path: thresholds by 32 passes each, the draw from contiguous chunks.
void draw_from_row(float m, uint lid) {
  uint threshold = 0u;
  if (USE_TOP_K) {
    for (int bit = 31; bit >= 0; --bit) {
      uint candidate = threshold | (1u << uint(bit));
      float count = 0.0;
      FOR_EACH_Y(count += key_of(y) >= candidate ? 1.0 : 0.0;)
      if (wg_sum(count) >= float(TOP_K)) threshold = candidate;
    }
  }
  float z = 0.0;
  FOR_EACH_Y(z += key_of(y) >= threshold ? exp(y - m) : 0.0;)
  z = wg_sum(z);
  if (TOP_P < 1.0) {
    uint p_threshold = 0u;
    for (int bit = 31; bit >= 0; --bit) {
      uint candidate = max(threshold, p_threshold | (1u << uint(bit)));
      float mass = 0.0;
      FOR_EACH_Y(mass += key_of(y) >= candidate ? exp(y - m) : 0.0;)
      if (wg_sum(mass) >= TOP_P * z) p_threshold = p_threshold | (1u << uint(bit));
    }
    threshold = max(threshold, p_threshold);
  }

  uint begin = min(V, lid * CHUNK), end = min(V, begin + CHUNK);
  float partial = 0.0;
  for (uint i = begin; i < end; ++i) {
    float y = x[i] * INV_T, w = exp(y - m);
    if (key_of(y) >= threshold && w >= MIN_P) partial += w;
  }
  s_prefix[lid] = partial;
  barrier();
  if (lid == 0u) {
    // Exclusive prefix sums; the owner of the draw is the chunk the target falls in (or the last
    // chunk with kept tokens, when rounding puts the target at the very end).
    float running = 0.0;
    uint last_kept = 0u;
    for (uint t = 0u; t < WG; ++t) {
      float p = s_prefix[t];
      s_prefix[t] = running;
      running += p;
      if (p > 0.0) last_kept = t;
    }
    float target = sample_uniform({{SEED}}u, row_position(step.n_tokens - 1u)) * running;
    s_owner = last_kept;
    for (uint t = 0u; t < WG; ++t) {
      float next = t + 1u < WG ? s_prefix[t + 1u] : running;
      if (next > target && next > s_prefix[t]) { s_owner = t; break; }
    }
    s_target = target;
  }
  barrier();
  if (lid != s_owner) return;
  float running = s_prefix[lid];
  uint chosen = begin;
  for (uint i = begin; i < end; ++i) {
    float y = x[i] * INV_T, w = exp(y - m);
    if (key_of(y) >= threshold && w >= MIN_P) {
      chosen = i;
      running += w;
      if (running > s_target) break;
    }
  }
  token[0] = int(chosen);
}

void main() {
  uint lid = gl_LocalInvocationID.x;
  // Pass 1: the maximum, and each invocation's.
  float own = NEG_INF;
  FOR_EACH_Y(own = max(own, y);)
  s_prefix[lid] = own;
  float m = wg_max(own);  // its barriers publish s_prefix
  if (!USE_TOP_K || TOP_K > GROUPS) {
    draw_from_row(m, lid);
    return;
  }
  // The bound: the TOP_K-th largest of the groups' maxima. Each group's maximum goes to its first
  // slot, which only that group's invocation reads before the barrier.
  float g = NEG_INF;
  if (lid < GROUPS) {
    for (uint j = 0u; j < GROUP; ++j) g = max(g, s_prefix[lid * GROUP + j]);
    s_prefix[lid * GROUP] = g;
  }
  barrier();
  float candidate = NEG_INF;
  if (lid < GROUPS) {
    uint at_least = 0u;
    for (uint j = 0u; j < GROUPS; ++j) at_least += s_prefix[j * GROUP] >= g ? 1u : 0u;
    if (at_least >= TOP_K) candidate = g;
  }
  float bound = wg_max(candidate);
  // Pass 2: how many values reach the bound; where they fit the list, pass 3 lists them, each
  // invocation from its offset (an inclusive scan of the counts).
  uint count = 0u;
  FOR_EACH_Y(count += y >= bound ? 1u : 0u;)
  s_prefix[lid] = float(count);  // wg_max above read s_prefix before its last barrier
  uint n = uint(wg_sum(float(count)));
  if (n > CAP) {  // uniform
    draw_from_row(m, lid);
    return;
  }
  for (uint d = 1u; d < WG; d <<= 1) {
    float add = lid >= d ? s_prefix[lid - d] : 0.0;
    barrier();
    s_prefix[lid] += add;
    barrier();
  }
  uint slot = uint(s_prefix[lid]) - count;
  FOR_EACH_Y(if (y >= bound) {
    s_idx[slot] = i;
    s_y[slot] = y;
    s_w[slot] = exp(y - m);
    ++slot;
  })
  barrier();
  draw_from_list(n, lid);
}
)",
                                                                                                                      {{"WG", absl::StrCat(wg)},
                                                                                                                       {"CAP", absl::StrCat(cap)},
                                                                                                                       {"V", absl::StrCat(vocab)},
                                                                                                                       {"TOP_K", absl::StrCat(top_k)},
                                                                                                                       {"INV_T", FloatLiteral(1.0 / c.node.attrs.Float("temperature"))},
                                                                                                                       {"TOP_P", FloatLiteral(c.node.attrs.Float("top_p"))},
                                                                                                                       {"MIN_P", FloatLiteral(c.node.attrs.Float("min_p"))},
                                                                                                                       {"SEED", absl::StrCat(static_cast<uint32_t>(c.node.attrs.Int("seed")))}}));
  k.args = {{c.node.id, true}, {c.node.inputs[0], false}};
  k.groups = {1, 1, 1};
  return k;
}

}  // namespace doppler::codegen
