#include "codegen/attention_projection.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "codegen/device_layout.h"
#include "codegen/glsl_common.h"
#include "codegen/weight_parts.h"
#include "graph/attention_inputs.h"

namespace doppler::codegen {
namespace {

// Registers a lane gives the weight parts it keeps in flight (a part's words, about, times the
// ring's depth): with the lane's x parts and the attention's own, within the 64 a lane has in a
// workgroup of 1,024.
constexpr int64_t kRingWords = 40;

}  // namespace

bool ProjectionInAttention(const graph::Graph& g, const graph::Node& m, int64_t tokens, const TargetCaps& caps) {
  if (m.kind != graph::OpKind::kMatMul || !m.attrs.Has("in_consumer") || m.attrs.Str("x_quant") != "q8") return false;
  const std::optional<graph::ValueId> attention = graph::AttentionOfProjection(g, m.id);
  if (!attention.has_value() || tokens != 1) return false;
  if (!caps.subgroup_arithmetic || !caps.integer_dot_product || caps.subgroup_size != caps.min_subgroup_size) return false;
  const graph::Node& x = g.node(m.inputs[0]);
  const graph::Node& w = g.node(m.inputs[1]);
  if (x.kind == graph::OpKind::kPart || x.kind == graph::OpKind::kLastRow) return false;
  const int64_t head_dim = g.node(*attention).attrs.Int("head_dim"), k = w.type.shape[1].value;
  if (head_dim % 2 != 0 || k % 32 != 0) return false;
  const absl::StatusOr<WeightParts> parts = WeightPartDecoder(0, w.type.dtype, k);
  if (!parts.ok() || parts->q8_glsl.empty() || k % parts->q8_values != 0) return false;
  // x's q8 staging, the head's rows and the subgroups' sums beside the attention's own shared memory.
  const int64_t shared = k + 4 * (k / 32) + 4 * 3 * head_dim + 4 * 32;
  return 3 * head_dim * static_cast<int64_t>(DeviceByteSize(w.type.dtype, k)) <= kProjectionMaxBytes &&
         shared <= static_cast<int64_t>(caps.max_shared_memory) / 4;
}

std::optional<graph::ValueId> ProjectionOf(const EmitContext& c) {
  const graph::AttentionInputs a = graph::AttentionInputsOf(c.node);
  const graph::Node& q = c.g.node(a.q);
  if (q.kind != graph::OpKind::kPart) return std::nullopt;
  const graph::Node& m = c.g.node(q.inputs[0]);
  if (!ProjectionInAttention(c.g, m, c.tokens, c.caps) || graph::AttentionOfProjection(c.g, m.id) != c.node.id) {
    return std::nullopt;
  }
  return m.id;
}

absl::StatusOr<std::string> ProjectionGlsl(const EmitContext& c, const graph::Node& m, uint32_t wg) {
  const graph::AttentionInputs a = graph::AttentionInputsOf(c.node);
  auto binding = [&](graph::ValueId v) {  // input i is binding i + 2 (the output is 1)
    const auto it = std::find(c.node.inputs.begin(), c.node.inputs.end(), v);
    return static_cast<uint32_t>(it - c.node.inputs.begin() + 2);
  };
  const graph::Node& w = c.g.node(m.inputs[1]);
  const int64_t k = w.type.shape[1].value, head_dim = c.node.attrs.Int("head_dim");
  absl::StatusOr<WeightParts> parts = WeightPartDecoder(binding(*a.k_new), w.type.dtype, k);
  if (!parts.ok()) return parts.status();
  const int64_t sg = c.caps.subgroup_size, subgroups = wg / sg;
  const int64_t rows_per_subgroup = (3 * head_dim + subgroups - 1) / subgroups;
  const int64_t parts_per_lane = (k / parts->q8_values + sg - 1) / sg;
  const int64_t items = rows_per_subgroup * parts_per_lane;
  const int64_t part_words = static_cast<int64_t>(DeviceByteSize(w.type.dtype, 256)) * parts->q8_values / 256 / 4 + 4;
  const int64_t depth = std::clamp<int64_t>(kRingWords / part_words, 1, items);
  return absl::StrCat(
      "#define PROJECT 1\n#extension GL_EXT_spirv_intrinsics : require\n", Q8ArithmeticGlsl(),
      "layout(std430, set = 0, binding = 2) readonly buffer Buf_px { vec4 px4[]; };\n",
      FloatQuadBuffer(binding(*a.v_new), "pnw", c.g.node(m.inputs[2]).type.dtype, true), parts->glsl, parts->q8_glsl,
      Fill(R"(
const uint PK = {{K}}u, PPARTS = PK / PV8, PBLOCKS = PK / 32u, P_XW = PV8 / 4u, P_XV = PV8 / 16u, P_RUN8 = PV8 / RUNS8;
const uint PSG = {{SG}}u, PNSG = WG / PSG, PROWS = 3u * HD, PRPS = (PROWS + PNSG - 1u) / PNSG;
const uint P_LPR = {{LPR}}u, PITEMS = PRPS * P_LPR, PDEPTH = {{DEPTH}}u;
shared uvec4 s_pxq[PPARTS * P_XV];  // x's quants, by part (x_slot)
shared float s_pxd[PBLOCKS];        // x's block scales
shared float s_proj[PROWS];         // the head's q, k and v
shared float s_pss[PNSG];           // the subgroups' sums of squares of x
// The step's q, new keys and new values (one token), as the attention reads them.
float load_q(uint i) { return s_proj[i % QW - gl_WorkGroupID.x * HD]; }
float load_kn(uint i) { return s_proj[HD + i % KVW - (gl_WorkGroupID.x / GROUP) * HD]; }
float load_vn(uint i) { return s_proj[2u * HD + i % KVW - (gl_WorkGroupID.x / GROUP) * HD]; }

// Row r of head h's rows (its q rows, then its kv head's k and v rows) in the fused weight.
uint p_row(uint r, uint h) {
  uint kv = (h / GROUP) * HD;
  return r < HD ? h * HD + r : r < 2u * HD ? QW + kv + r - HD : QW + KVW + kv + r - 2u * HD;
}
// Item j of a lane: row gl_SubgroupID + PNSG · (j / P_LPR), part lane + PSG · (j % P_LPR), clamped.
WPart8 p_load(uint j, uint h) {
  uint r = min(gl_SubgroupID + PNSG * (j / P_LPR), PROWS - 1u);
  uint p = min(gl_SubgroupInvocationID + PSG * (j % P_LPR), PPARTS - 1u);
  return w_load8(p_row(r, h), p);
}

void project(uint h) {
  uint lid = gl_LocalInvocationID.x, lane = gl_SubgroupInvocationID, sg = gl_SubgroupID;
  // The first items' weights are loaded first, to be in flight while x is staged.
  WPart8 ring[PDEPTH];
  [[unroll]] for (uint j = 0u; j < PDEPTH; ++j) ring[j] = p_load(j, h);
  // x times the norm weight as q8 blocks (graph/activation_quant.h), a block an invocation, and
  // x's sum of squares for the norm's 1 / rms, which multiplies the dot products.
  float ss = 0.0;
  for (uint b = lid; b < PBLOCKS; b += WG) {
    vec4 v[8];
    float amax = 0.0;
    [[unroll]] for (uint i = 0u; i < 8u; ++i) {
      vec4 x = px4[b * 8u + i];
      ss += dot(x, x);
      v[i] = x * (load4_pnw(32u * b + 4u * i) + {{OFFSET}});
      vec4 av = abs(v[i]);
      amax = max(amax, max(max(av.x, av.y), max(av.z, av.w)));
    }
    float d = q8_scale(amax), id = q8_inverse(d);
    s_pxd[b] = d;
    [[unroll]] for (uint i = 0u; i < 8u; ++i) {
      uint slot = x_slot(32u * b + 4u * i);
      s_pxq[(slot / P_XW) * P_XV + (slot % P_XW) / 4u][slot % 4u] = pack_q8(v[i], id);
    }
  }
  ss = subgroupAdd(ss);
  if (subgroupElect()) s_pss[sg] = ss;
  barrier();
  float total = 0.0;
  [[unroll]] for (uint g = 0u; g < PNSG; ++g) total += s_pss[g];
  float inv = inversesqrt(total / float(PK) + {{EPS}});
  // The lane's parts of x: the same parts of every row it takes.
  uvec4 xw[P_LPR][P_XV];
  float xdr[P_LPR][RUNS8], xrun[P_LPR][RUNS8];
  [[unroll]] for (uint i = 0u; i < P_LPR; ++i) {
    uint p = min(lane + PSG * i, PPARTS - 1u);
    [[unroll]] for (uint v = 0u; v < P_XV; ++v) xw[i][v] = s_pxq[p * P_XV + v];
    [[unroll]] for (uint r = 0u; r < RUNS8; ++r) {
      xdr[i][r] = s_pxd[run_k(p, r) >> 5];
      int q_sum = 0;
      [[unroll]] for (uint j = r * (P_RUN8 / 4u); j < (r + 1u) * (P_RUN8 / 4u); ++j) q_sum += sdot4(xw[i][j / 4u][j % 4u], 0x01010101u);
      xrun[i][r] = xdr[i][r] * i2f(q_sum);
    }
  }
  // The items, PDEPTH in flight; a row's sum once its last part is in.
  float acc = 0.0;
  [[unroll]] for (uint j = 0u; j < PITEMS; ++j) {
    WPart8 wp = ring[j % PDEPTH];
    if (j + PDEPTH < PITEMS) ring[j % PDEPTH] = p_load(j + PDEPTH, h);
    uint i = j % P_LPR, p = lane + PSG * i;
    if (p < PPARTS) acc += w_dot_q8(wp, p, xw[i], xdr[i], xrun[i]);
    if (i == P_LPR - 1u) {
      acc = subgroupAdd(acc);
      uint r = sg + PNSG * (j / P_LPR);
      if (subgroupElect() && r < PROWS) s_proj[r] = acc * inv;
      acc = 0.0;
    }
  }
  barrier();
}
)",
           {{"K", absl::StrCat(k)},
            {"SG", absl::StrCat(sg)},
            {"LPR", absl::StrCat(parts_per_lane)},
            {"DEPTH", absl::StrCat(depth)},
            {"OFFSET", FloatLiteral(m.attrs.Float("norm_offset"))},
            {"EPS", FloatLiteral(m.attrs.Float("norm_eps"))}}));
}

}  // namespace doppler::codegen
