// Sampling on the GPU: recording recent tokens, the repeat penalty, and the draw itself. The steps
// and the random generator are those of graph/sampling.h, so the interpreter is the oracle.
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/glsl_common.h"

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
  k.glsl = absl::StrCat(ShaderHeader(kWorkgroup), IntBuffer(1, "history", false), IntBuffer(2, "ids", true), Fill(R"(
void main() {
  uint t = gl_GlobalInvocationID.x;
  if (t >= step.n_tokens) return;
  history[(step.pos + t) % {{R}}u] = ids[t];
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
  k.glsl = absl::StrCat(ShaderHeader(kWorkgroup), FloatBuffer(1, "y", graph::DType::kF32, false),
                        FloatBuffer(2, "x", graph::DType::kF32, true), IntBuffer(3, "history", true), Fill(R"(
shared int s_recent[{{R}}];

void main() {
  uint last = step.pos + step.n_tokens - 1u;
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

// One workgroup; each invocation owns a contiguous chunk of the vocabulary so that the final draw
// can walk the kept tokens in index order. Thresholds are found by building the float's ordered
// key bit by bit (32 counting or mass passes), not by sorting.
absl::StatusOr<Kernel> EmitSample(const EmitContext& c) {
  if (c.node.attrs.Float("temperature") <= 0.0) {
    absl::StatusOr<Kernel> greedy = EmitArgmax(c);
    if (greedy.ok()) greedy->family = "sample", greedy->variant = "greedy";
    return greedy;
  }
  constexpr uint32_t kWorkgroup = 256;
  const int64_t vocab = c.input(0).type.shape[1].value;
  const int64_t top_k = c.node.attrs.Int("top_k");
  Kernel k;
  k.family = "sample";
  k.variant = "threshold";
  // Shared-memory tree reductions on every device: the top-k/top-p thresholds keep one summation order.
  k.glsl = absl::StrCat(ShaderHeader(kWorkgroup), IntBuffer(1, "token", false),
                        FloatBuffer(2, "x", graph::DType::kF32, true), WorkgroupReductions(kWorkgroup, false), kUniform, Fill(R"(
const uint WG = {{WG}}u, V = {{V}}u, CHUNK = (V + WG - 1u) / WG;
const uint TOP_K = {{TOP_K}}u;
const float INV_T = {{INV_T}}, TOP_P = {{TOP_P}}, MIN_P = {{MIN_P}};
shared float s_prefix[WG];
shared float s_target;
shared uint s_owner;

uint key_of(float f) {
  uint b = floatBitsToUint(f);
  return (b & 0x80000000u) != 0u ? ~b : b | 0x80000000u;
}

void main() {
  uint lid = gl_LocalInvocationID.x;
  uint begin = min(V, lid * CHUNK), end = min(V, begin + CHUNK);

  float m = uintBitsToFloat(0xFF800000u);
  for (uint i = begin; i < end; ++i) m = max(m, x[i] * INV_T);
  m = wg_max(m);

  uint threshold = 0u;
  if (TOP_K > 0u && TOP_K < V) {
    for (int bit = 31; bit >= 0; --bit) {
      uint candidate = threshold | (1u << uint(bit));
      float count = 0.0;
      for (uint i = begin; i < end; ++i) count += key_of(x[i] * INV_T) >= candidate ? 1.0 : 0.0;
      if (wg_sum(count) >= float(TOP_K)) threshold = candidate;
    }
  }
  float z = 0.0;
  for (uint i = begin; i < end; ++i) {
    float y = x[i] * INV_T;
    if (key_of(y) >= threshold) z += exp(y - m);
  }
  z = wg_sum(z);
  if (TOP_P < 1.0) {
    uint p_threshold = 0u;
    for (int bit = 31; bit >= 0; --bit) {
      uint candidate = max(threshold, p_threshold | (1u << uint(bit)));
      float mass = 0.0;
      for (uint i = begin; i < end; ++i) {
        float y = x[i] * INV_T;
        if (key_of(y) >= candidate) mass += exp(y - m);
      }
      if (wg_sum(mass) >= TOP_P * z) p_threshold = p_threshold | (1u << uint(bit));
    }
    threshold = max(threshold, p_threshold);
  }

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
    float target = sample_uniform({{SEED}}u, step.pos + step.n_tokens - 1u) * running;
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
)",
                                                                                                                      {{"WG", absl::StrCat(kWorkgroup)},
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
