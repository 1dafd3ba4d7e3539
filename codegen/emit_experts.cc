// The mixture-of-experts kernels: the router (top_k, route_weights) and the expert matrix product.
//
// They read the expert ids from a device buffer written by top_k in the same step, so a decode
// step routes with no readback and the command buffer replays as recorded. expert_matmul reads
// only the chosen experts' rows: a workgroup computes kCols output columns of one token's slot
// (or, summing, of one token over all its slots), its invocations taking the rows' parts
// (codegen/weight_parts.h: a few values under one block scale, in whole-word loads) in turn and
// reducing the column sums over the workgroup. Its epilogue's bias steps read the chosen
// expert's row of the biases.
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/glsl_common.h"
#include "codegen/weight_parts.h"
#include "graph/epilogue.h"

namespace doppler::codegen {
namespace {

// Output columns of a workgroup of expert_matmul (twice the weight rows where gated).
constexpr int64_t kCols = 4;
constexpr uint32_t kExpertWorkgroup = 128;
constexpr uint32_t kRouteWorkgroup = 64;

}  // namespace

// One workgroup per row: k rounds of the workgroup's first maximum over the values not yet taken
// (the larger value, on ties the lower index: top_k's order).
absl::StatusOr<Kernel> EmitTopK(const EmitContext& c) {
  const graph::Node& x = c.input(0);
  const int64_t experts = x.type.shape[1].value, k = c.node.attrs.Int("k");
  const uint32_t wg = WidestPowerOfTwoWorkgroup(c.caps, kRouteWorkgroup);
  Kernel out;
  out.family = "router";
  out.variant = absl::StrCat("top_k", c.caps.subgroup_arithmetic ? ".sg" : "");
  out.glsl = absl::StrCat(ShaderHeader(wg), IntBuffer(1, "ids", false),
                          Fill(absl::StrCat(R"(
const uint WG = {{WG}}u, E = {{E}}u, K = {{K}}u, NONE = 0xFFFFFFFFu;
layout(std430, set = 0, binding = 2) readonly buffer Buf_x { float x[]; };
shared uint chosen[K];
bool taken(uint e, uint n) {
  for (uint j = 0u; j < n; ++j) {
    if (chosen[j] == e) return true;
  }
  return false;
}
)",
                                            FirstMaxReductionGlsl(c.caps.subgroup_arithmetic), R"(
void main() {
  uint row = gl_WorkGroupID.x;
  if (row >= {{ROWS}}) return;  // uniform across the workgroup
  for (uint j = 0u; j < K; ++j) {
    float best = uintBitsToFloat(0xFF800000u);  // -inf
    uint best_i = NONE;
    for (uint e = gl_LocalInvocationID.x; e < E; e += WG) {
      float v = x[row * E + e];
      if (!taken(e, j) && (best_i == NONE || v > best)) { best = v; best_i = e; }
    }
    best_i = first_max(best, best_i);
    if (gl_LocalInvocationID.x == 0u) {
      chosen[j] = best_i;
      ids[row * K + j] = int(best_i);
    }
    barrier();  // chosen[j] is seen by all, and first_max may run again
  }
}
)"),
                               {{"WG", absl::StrCat(wg)},
                                {"E", absl::StrCat(experts)},
                                {"K", absl::StrCat(k)},
                                {"ROWS", RowsExpr(x.type.shape[0].tokens, c.rows(x))}}));
  out.args = {{c.node.id, true}, {c.node.inputs[0], false}};
  out.groups = {static_cast<uint32_t>(c.rows(x)), 1, 1};
  return out;
}

// One invocation per row: the row's largest logit, the softmax's denominator over the chosen
// logits or over all, then the chosen ones' weights.
absl::StatusOr<Kernel> EmitRouteWeights(const EmitContext& c) {
  const graph::Node& logits = c.input(0);
  const int64_t experts = logits.type.shape[1].value, k = c.input(1).type.shape[1].value;
  const bool over_all = c.node.attrs.Str("weighting") == "softmax_all";
  Kernel out;
  out.family = "router";
  out.variant = absl::StrCat("route_weights.", c.node.attrs.Str("weighting"));
  out.glsl = absl::StrCat(ShaderHeader(kRouteWorkgroup), FloatBuffer(1, "w", graph::DType::kF32, false),
                          FloatBuffer(2, "x", graph::DType::kF32, true), IntBuffer(3, "ids", true),
                          Fill(R"(
const uint E = {{E}}u, K = {{K}}u;
// A chosen expert; an id out of range reads the last expert's logit rather than past the row.
float chosen(uint row, uint j) { return x[row * E + min(uint(ids[row * K + j]), E - 1u)]; }
void main() {
  uint row = gl_GlobalInvocationID.x;
  if (row >= {{ROWS}}) return;
  float mx = uintBitsToFloat(0xFF800000u);
  for (uint e = 0u; e < E; ++e) mx = max(mx, x[row * E + e]);
  float sum = 0.0;
  if ({{ALL}}) {
    for (uint e = 0u; e < E; ++e) sum += exp(x[row * E + e] - mx);
  } else {
    for (uint j = 0u; j < K; ++j) sum += exp(chosen(row, j) - mx);
  }
  for (uint j = 0u; j < K; ++j) w[row * K + j] = exp(chosen(row, j) - mx) / sum;
}
)",
                               {{"E", absl::StrCat(experts)},
                                {"K", absl::StrCat(k)},
                                {"ALL", over_all ? "true" : "false"},
                                {"ROWS", RowsExpr(logits.type.shape[0].tokens, c.rows(logits))}}));
  out.args = {{c.node.id, true}, {c.node.inputs[0], false}, {c.node.inputs[1], false}};
  out.groups = {CeilDiv(c.rows(logits), kRouteWorkgroup), 1, 1};
  return out;
}

// Workgroup i is (token, slot group, column block): with weighted_sum a token's slots are one
// group, summed in the workgroup; else each slot is its own. Each column needs one dot product,
// or two where gated (the expert's gate row c and up row N/2 + c).
absl::StatusOr<Kernel> EmitExpertMatMul(const EmitContext& c) {
  const graph::Node& x = c.input(0);
  const graph::Node& w = c.input(1);
  const int64_t experts = c.node.attrs.Int("experts");
  const int64_t slots = c.input(2).type.shape[1].value;
  const int64_t rows = w.type.shape[0].value / experts, kdim = w.type.shape[1].value;
  const bool weighted = c.node.attrs.Int("weighted_sum") == 1;
  const bool per_slot_x = x.type.shape[1].value != kdim;
  absl::StatusOr<std::vector<graph::EpilogueStep>> steps = graph::ParseEpilogue(c.node.attrs.Str("epilogue"));
  if (!steps.ok()) return steps.status();
  const bool gated = graph::IsGated(*steps);
  const int64_t cols = gated ? rows / 2 : rows;
  // The epilogue on one column's value v (and u, its up value, where gated): g and u (bias steps
  // before the gated one adding to both halves), then v. A bias step reads its expert's row of
  // the biases, input i at binding i + 2 (after x, w, ids and the route weights).
  const size_t first_extra = weighted ? 4 : 3;
  std::string epilogue = gated ? "" : "float v = g;\n", buffers, variant;
  bool gated_yet = !gated;
  size_t biases = 0;
  for (graph::EpilogueStep s : *steps) {
    switch (s) {
      case graph::EpilogueStep::kSiluMul:
        absl::StrAppend(&epilogue, "float v = act_silu(g) * u;\n");
        break;
      case graph::EpilogueStep::kGeluTanhMul:
        absl::StrAppend(&epilogue, "float v = act_gelu_tanh(g) * u;\n");
        break;
      case graph::EpilogueStep::kClampedSwiglu:
        absl::StrAppend(&epilogue, "float v = act_clamped_swiglu(g, u);\n");
        absl::StrAppend(&buffers, ClampedSwigluGlsl(c.node.attrs.Float("alpha"), c.node.attrs.Float("limit")));
        break;
      case graph::EpilogueStep::kSilu:
        absl::StrAppend(&epilogue, "v = act_silu(v);\n");
        break;
      case graph::EpilogueStep::kGeluTanh:
        absl::StrAppend(&epilogue, "v = act_gelu_tanh(v);\n");
        break;
      case graph::EpilogueStep::kBias: {
        const size_t input = first_extra + biases++;
        const std::string name = absl::StrCat("b", input);
        absl::StrAppend(&buffers, FloatBuffer(static_cast<uint32_t>(input + 2), name, c.input(static_cast<int>(input)).type.dtype, true));
        if (!gated_yet) {
          absl::StrAppend(&epilogue, "g += load_", name, "(e * 2u * COLS + bcol);\nu += load_", name,
                          "(e * 2u * COLS + COLS + bcol);\n");
        } else {
          absl::StrAppend(&epilogue, "v += load_", name, "(e * COLS + bcol);\n");
        }
        break;
      }
      default:
        return absl::InvalidArgumentError(absl::StrCat("expert_matmul '", c.node.label, "': no kernel for epilogue step ",
                                                       graph::EpilogueStepName(s)));
    }
    gated_yet = gated_yet || graph::IsGatedStep(s);
    if (s == graph::EpilogueStep::kBias || s == graph::EpilogueStep::kClampedSwiglu) {
      absl::StrAppend(&variant, "+", graph::EpilogueStepName(s));
    }
  }
  absl::StatusOr<WeightParts> parts = WeightPartDecoder(3, w.type.dtype, kdim);
  if (!parts.ok()) return parts.status();
  const int64_t blocks = (cols + kCols - 1) / kCols, groups_per_token = weighted ? 1 : slots;
  const int64_t bucket_rows = c.rows(x);
  // As many invocations as a row has parts (a subgroup at least), up to kExpertWorkgroup.
  uint32_t wanted = c.caps.subgroup_size;
  while (wanted < kExpertWorkgroup && wanted < parts->per_row) wanted *= 2;
  const uint32_t wg = WidestPowerOfTwoWorkgroup(c.caps, wanted);
  Kernel k;
  k.family = "expert_matmul";
  k.variant = absl::StrCat("gemv.", graph::Name(w.type.dtype), gated ? ".gated" : "", weighted ? ".sum" : "",
                           per_slot_x ? ".slot_x" : "", variant);
  k.glsl = absl::StrCat(
      ShaderHeader(wg), FloatBuffer(1, "y", graph::DType::kF32, false), FloatBuffer(2, "x", graph::DType::kF32, true),
      parts->glsl, IntBuffer(4, "ids", true),
      weighted ? FloatBuffer(5, "rw", graph::DType::kF32, true) : "", ActivationGlsl(), buffers,
      WorkgroupReductions(wg, c.caps.subgroup_arithmetic),
      Fill(R"(
const uint WG = {{WG}}u, E = {{E}}u, S = {{S}}u, N = {{N}}u, KD = {{KD}}u, COLS = {{COLS}}u, C = {{C}}u;
const uint BLOCKS = {{BLOCKS}}u, GROUPS = {{GROUPS}}u, XW = {{XW}}u, PARTS = {{PARTS}}u;
const bool GATED = {{GATED}}, WEIGHTED = {{WEIGHTED}}, SLOT_X = {{SLOT_X}};

void main() {
  uint i = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  uint blk = i % BLOCKS, group = (i / BLOCKS) % GROUPS, t = i / (BLOCKS * GROUPS);
  if (t >= {{ROWS}}) return;  // uniform across the workgroup
  float total[C];
  [[unroll]] for (uint c = 0u; c < C; ++c) total[c] = 0.0;
  uint first = WEIGHTED ? 0u : group, last = WEIGHTED ? S : group + 1u;
  for (uint j = first; j < last; ++j) {
    // An id out of range reads the last expert rather than past the weight.
    uint e = min(uint(ids[t * S + j]), E - 1u);
    uint xo = t * XW + (SLOT_X ? j * KD : 0u);
    float gs[C], us[C];
    [[unroll]] for (uint c = 0u; c < C; ++c) { gs[c] = 0.0; us[c] = 0.0; }
    for (uint p = gl_LocalInvocationID.x; p < PARTS; p += WG) {
      // Every row's part is loaded before the first is used, so the loads are in flight together.
      WPart gp[C], up[C];
      [[unroll]] for (uint c = 0u; c < C; ++c) {
        uint col = min(blk * C + c, COLS - 1u);
        gp[c] = w_load(e * N + col, p);
        if (GATED) up[c] = w_load(e * N + COLS + col, p);
      }
      float xv[PV], xrun[RUNS];
      [[unroll]] for (uint v = 0u; v < PV; ++v) xv[v] = x[xo + w_part_k(p, v)];
      [[unroll]] for (uint r = 0u; r < RUNS; ++r) {
        float sum = 0.0;
        [[unroll]] for (uint v = 0u; v < PV / RUNS; ++v) sum += xv[r * (PV / RUNS) + v];
        xrun[r] = sum;
      }
      [[unroll]] for (uint c = 0u; c < C; ++c) {
        gs[c] += w_dot(gp[c], p, xv, xrun);
        if (GATED) us[c] += w_dot(up[c], p, xv, xrun);
      }
    }
    float slot_weight = {{SLOT_WEIGHT}};
    [[unroll]] for (uint c = 0u; c < C; ++c) {
      float g = wg_sum(gs[c]);
      float u = GATED ? wg_sum(us[c]) : 0.0;
      {{EPILOGUE}}
      total[c] += slot_weight * v;
    }
  }
  if (gl_LocalInvocationID.x == 0u) {
    [[unroll]] for (uint c = 0u; c < C; ++c) {
      uint col = blk * C + c;
      if (col < COLS) y[(t * GROUPS + group) * COLS + col] = total[c];
    }
  }
}
)",
           {{"WG", absl::StrCat(wg)},
            {"E", absl::StrCat(experts)},
            {"S", absl::StrCat(slots)},
            {"N", absl::StrCat(rows)},
            {"KD", absl::StrCat(kdim)},
            {"COLS", absl::StrCat(cols)},
            {"C", absl::StrCat(kCols)},
            {"BLOCKS", absl::StrCat(blocks)},
            {"GROUPS", absl::StrCat(groups_per_token)},
            {"XW", absl::StrCat(x.type.shape[1].value)},
            {"PARTS", absl::StrCat(parts->per_row)},
            {"GATED", gated ? "true" : "false"},
            {"WEIGHTED", weighted ? "true" : "false"},
            {"SLOT_X", per_slot_x ? "true" : "false"},
            {"EPILOGUE", biases > 0 ? absl::StrCat("uint bcol = min(blk * C + c, COLS - 1u);\n", epilogue) : epilogue},
            {"SLOT_WEIGHT", weighted ? "rw[t * S + j]" : "1.0"},
            {"ROWS", RowsExpr(x.type.shape[0].tokens, bucket_rows)}}));
  k.args = {{c.node.id, true}};
  for (graph::ValueId in : c.node.inputs) k.args.push_back({in, false});
  k.groups = WideGrid(static_cast<uint32_t>(bucket_rows * groups_per_token * blocks));
  return k;
}

}  // namespace doppler::codegen
