// The router's kernels of the mixtures of experts: top_k (the chosen experts' ids, which the
// expert products read from the device in the same step), route_weights (their weights) and
// route_sum (a token's expert slots weighted and summed, where the expert product does not sum
// them itself: codegen/in_matmul.h).
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/glsl_common.h"

namespace doppler::codegen {
namespace {

constexpr uint32_t kRouteWorkgroup = 64;

}  // namespace

// One workgroup per row, a subgroup where subgroups reduce (no barriers in the reduction): each
// invocation holds its experts' logits in registers, and k rounds take the workgroup's first
// maximum over the values not yet taken (the larger value, on ties the lower index: top_k's order);
// the invocation holding the chosen one marks it taken.
absl::StatusOr<Kernel> EmitTopK(const EmitContext& c) {
  const graph::Node& x = c.input(0);
  const int64_t experts = x.type.shape[1].value, k = c.node.attrs.Int("k");
  const bool subgroups = c.caps.subgroup_arithmetic;
  // Each invocation marks its values taken in the bits of a word: 32 values an invocation at most.
  uint32_t wanted = subgroups ? c.caps.subgroup_size : kRouteWorkgroup;
  while (int64_t{wanted} * 32 < experts) wanted *= 2;
  const uint32_t wg = WidestPowerOfTwoWorkgroup(c.caps, wanted);
  if (int64_t{wg} * 32 < experts) {
    return absl::InvalidArgumentError(absl::StrCat("top_k '", c.node.label, "': ", experts,
                                                   " experts are more than a workgroup of ", wg, " can rank"));
  }
  Kernel out;
  out.family = "router";
  out.variant = absl::StrCat("top_k", subgroups ? ".sg" : "");
  out.glsl = absl::StrCat(ShaderHeader(wg), IntBuffer(1, "ids", false),
                          Fill(absl::StrCat(R"(
const uint WG = {{WG}}u, E = {{E}}u, K = {{K}}u, NONE = 0xFFFFFFFFu, PER = (E + WG - 1u) / WG;
layout(std430, set = 0, binding = 2) readonly buffer Buf_x { float x[]; };
shared uint chosen;
)",
                                            FirstMaxReductionGlsl(subgroups), R"(
void main() {
  uint row = gl_WorkGroupID.x;
  if (row >= {{ROWS}}) return;  // uniform across the workgroup
  uint lid = gl_LocalInvocationID.x, taken = 0u;
  float v[PER];
  [[unroll]] for (uint i = 0u; i < PER; ++i) {
    uint e = lid + i * WG;
    v[i] = e < E ? x[row * E + e] : 0.0;
  }
  for (uint j = 0u; j < K; ++j) {
    float best = uintBitsToFloat(0xFF800000u);  // -inf
    uint best_i = NONE;
    [[unroll]] for (uint i = 0u; i < PER; ++i) {
      uint e = lid + i * WG;
      if (e < E && (taken & (1u << i)) == 0u && (best_i == NONE || v[i] > best)) { best = v[i]; best_i = e; }
    }
    best_i = first_max(best, best_i);  // the workgroup's in invocation 0
    if (lid == 0u) {
      ids[row * K + j] = int(best_i);
      chosen = best_i;
    }
    barrier();
    uint e = chosen;
    if (e != NONE && e % WG == lid) taken |= 1u << (e / WG);
    barrier();  // chosen is read before it is written again, and first_max may run again
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

// One invocation an element of the sum, the slots in order.
absl::StatusOr<Kernel> EmitRouteSum(const EmitContext& c) {
  const graph::Node& y = c.input(0);
  const int64_t slots = c.input(1).type.shape[1].value, width = c.node.type.shape[1].value;
  const int64_t rows = c.rows(y);
  constexpr uint32_t kWorkgroup = 64;
  Kernel k;
  k.family = "router";
  k.variant = "route_sum";
  k.glsl = absl::StrCat(ShaderHeader(kWorkgroup), FloatBuffer(1, "sum", graph::DType::kF32, false),
                        FloatBuffer(2, "y", graph::DType::kF32, true), FloatBuffer(3, "rw", graph::DType::kF32, true),
                        Fill(R"(
const uint S = {{S}}u, N = {{N}}u;
void main() {
  uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  uint t = i / N, col = i % N;
  if (t >= {{ROWS}}) return;
  float total = 0.0;
  for (uint j = 0u; j < S; ++j) total += rw[t * S + j] * y[(t * S + j) * N + col];
  sum[i] = total;
}
)",
                             {{"S", absl::StrCat(slots)},
                              {"N", absl::StrCat(width)},
                              {"ROWS", RowsExpr(y.type.shape[0].tokens, rows)}}));
  k.args = {{c.node.id, true}, {c.node.inputs[0], false}, {c.node.inputs[1], false}};
  k.groups = WideGrid(CeilDiv(rows * width, kWorkgroup));
  return k;
}

}  // namespace doppler::codegen
