// Causal attention over the KV cache with an online softmax.
//
// One workgroup per (query head, token). Keys are visited in chunks of one key per invocation:
// each chunk's scores update a running max and sum, and every invocation rescales and accumulates
// the output dimensions it owns. Shared memory is O(workgroup + head_dim), independent of the KV
// length, so any context fits.
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/glsl_common.h"

namespace doppler::codegen {
namespace {
constexpr uint32_t kWorkgroup = 64;
}

absl::StatusOr<Kernel> EmitAttention(const EmitContext& c) {
  const int64_t heads = c.node.attrs.Int("heads"), kv_heads = c.node.attrs.Int("kv_heads");
  const int64_t head_dim = c.node.attrs.Int("head_dim"), window = c.node.attrs.Int("window");
  const graph::DType cache_dtype = c.input(1).type.dtype;
  Kernel k;
  k.family = "attention";
  k.variant = absl::StrCat("online_softmax.", graph::Name(cache_dtype), window > 0 ? ".window" : "");
  // A rope prologue (a table input) rotates q as it is loaded.
  const bool rope = c.node.inputs.size() == 4;
  std::string q_value = "float q_value(uint t, uint e) { return q[t * QW + e]; }\n";
  if (rope) {
    absl::StrAppend(&k.variant, c.node.attrs.Str("style") == "neox" ? "+rope.neox" : "+rope.interleaved");
    q_value = absl::StrCat(FloatBuffer(5, "table", graph::DType::kF32, true),
                           RopeFunction("q_value", "load_q", "table", heads * head_dim, head_dim,
                                        c.node.attrs.Str("style") == "neox"));
  }
  k.glsl = absl::StrCat(ShaderHeader(kWorkgroup), FloatBuffer(1, "o", graph::DType::kF32, false),
                        FloatBuffer(2, "q", graph::DType::kF32, true), FloatBuffer(3, "kc", cache_dtype, true),
                        FloatBuffer(4, "vc", cache_dtype, true), WorkgroupReductions(kWorkgroup),
                        "const uint QW = ", heads * head_dim, "u;\n", q_value, Fill(R"(
const uint WG = {{WG}}u, HD = {{HD}}u, GROUP = {{GROUP}}u, KVW = {{KVW}}u;
const uint WINDOW = {{WINDOW}}u, CAP = {{CAP}}u;  // key j lives in cache row j % CAP (a ring)
const uint DIMS_PER_INVOCATION = (HD + WG - 1u) / WG;
shared float s_q[HD];
shared float s_p[WG];
shared uint s_row[WG];  // cache offset of each key of the chunk

void main() {
  uint lid = gl_LocalInvocationID.x;
  uint h = gl_WorkGroupID.x;
  uint t = gl_WorkGroupID.y;
  if (t >= step.n_tokens) return;  // uniform across the workgroup
  uint p = step.pos + t;
  uint first = (WINDOW > 0u && p + 1u > WINDOW) ? p + 1u - WINDOW : 0u;
  uint kv_base = (h / GROUP) * HD;

  for (uint d = lid; d < HD; d += WG) s_q[d] = q_value(t, h * HD + d) * {{SCALE}};
  barrier();

  float run_max = -3.0e38;
  float run_sum = 0.0;
  float acc[DIMS_PER_INVOCATION];
  [[unroll]] for (uint i = 0; i < DIMS_PER_INVOCATION; ++i) acc[i] = 0.0;

  for (uint chunk = first; chunk <= p; chunk += WG) {
    uint j = chunk + lid;
    float score = -3.0e38;
    uint row = (j % CAP) * KVW + kv_base;
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
    if (d < HD) o[t * QW + h * HD + d] = acc[i] / run_sum;
  }
}
)",
                                                                                       {{"WG", absl::StrCat(kWorkgroup)},
                                                                                        {"HD", absl::StrCat(head_dim)},
                                                                                        {"GROUP", absl::StrCat(heads / kv_heads)},
                                                                                        {"KVW", absl::StrCat(kv_heads * head_dim)},
                                                                                        
                                                                                        {"WINDOW", absl::StrCat(window)},
                                                                                        {"CAP", absl::StrCat(c.input(1).type.shape[0].value)},
                                                                                        {"SCALE", FloatLiteral(c.node.attrs.Float("scale"))}}));
  k.args = {{c.node.id, true}};
  for (graph::ValueId in : c.node.inputs) k.args.push_back({in, false});
  k.groups = {static_cast<uint32_t>(heads), static_cast<uint32_t>(c.tokens), 1};
  return k;
}

}  // namespace doppler::codegen
