// The router's kernels of the mixtures of experts: top_k (the chosen experts' ids, which the
// expert products read from the device in the same step, or rank themselves: codegen/in_matmul.h),
// route_weights (their weights, and the ids where top_k has no dispatch of its own) and
// route_sum (a token's expert slots weighted and summed, where the expert product does not sum
// them itself: codegen/in_matmul.h).
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/expert_ranking.h"
#include "codegen/glsl_common.h"
#include "codegen/in_matmul.h"

namespace doppler::codegen {
namespace {

constexpr uint32_t kRouteWorkgroup = 64;

// A workgroup that ranks a row (codegen/expert_ranking.h): a subgroup where subgroups reduce,
// else kRouteWorkgroup invocations; wider where the experts are more than its invocations hold.
uint32_t RankingWorkgroup(const TargetCaps& caps, int64_t experts) {
  uint32_t wanted = caps.subgroup_arithmetic ? caps.subgroup_size : kRouteWorkgroup;
  while (int64_t{wanted} * kLogitsAnInvocationRanks < experts) wanted *= 2;
  return WidestPowerOfTwoWorkgroup(caps, wanted);
}

// A kernel that ranks each row of `logits` in a workgroup of its own: the ranking's GLSL after
// `const uint WG` and `float logit(uint row, uint e)` (logits at binding 2).
absl::StatusOr<std::string> RankingGlsl(const EmitContext& c, const graph::Node& logits, int64_t k, uint32_t& wg) {
  const int64_t experts = logits.type.shape[1].value;
  wg = RankingWorkgroup(c.caps, experts);
  absl::StatusOr<ExpertRanking> ranking = ChooseExpertRanking(c.caps, wg, experts, k);
  if (!ranking.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(graph::OpName(c.node.kind), " '", c.node.label, "': ",
                                                   ranking.status().message()));
  }
  return absl::StrCat("const uint WG = ", wg, "u;\n", FloatBuffer(2, "logits", logits.type.dtype, true),
                      "float logit(uint row, uint e) { return load_logits(row * ", experts, "u + e); }\n",
                      RankExpertsGlsl(c.caps, *ranking, experts, k));
}

}  // namespace

// One workgroup per row ranks it (codegen/expert_ranking.h) and writes the chosen experts' ids.
absl::StatusOr<Kernel> EmitTopK(const EmitContext& c) {
  const graph::Node& x = c.input(0);
  const int64_t k = c.node.attrs.Int("k");
  uint32_t wg = 0;
  absl::StatusOr<std::string> ranking = RankingGlsl(c, x, k, wg);
  if (!ranking.ok()) return ranking.status();
  Kernel out;
  out.family = "router";
  out.variant = absl::StrCat("top_k", c.caps.subgroup_arithmetic ? ".sg" : "");
  out.glsl = absl::StrCat(ShaderHeader(wg), IntBuffer(1, "ids", false), *ranking,
                          Fill(R"(
void main() {
  uint row = gl_WorkGroupID.x;
  if (row >= {{ROWS}}) return;  // uniform across the workgroup
  rank_experts(row);
  for (uint j = gl_LocalInvocationID.x; j < {{K}}u; j += WG) ids[row * {{K}}u + j] = int(ranked[j]);
}
)",
                               {{"K", absl::StrCat(k)}, {"ROWS", RowsExpr(x.type.shape[0].tokens, c.rows(x))}}));
  out.args = {{c.node.id, true}, {c.node.inputs[0], false}};
  out.groups = {static_cast<uint32_t>(c.rows(x)), 1, 1};
  return out;
}

// A row's weights: its largest logit, the softmax's denominator over the chosen logits or over all,
// then the chosen ones' weights. One invocation per row; where the kernel computes top_k (top_k in
// its readers, codegen/in_matmul.h), a workgroup per row ranks it, writes the ids, and its first
// invocation the weights.
absl::StatusOr<Kernel> EmitRouteWeights(const EmitContext& c) {
  const graph::Node& logits = c.input(0);
  const int64_t experts = logits.type.shape[1].value, k = c.input(1).type.shape[1].value;
  const bool over_all = c.node.attrs.Str("weighting") == "softmax_all";
  absl::StatusOr<InMatMulRules> rules = InMatMulRulesFromTune();
  if (!rules.ok()) return rules.status();
  const bool ranks = TopKInReaders(c.g, c.input(1), c.tokens, *rules);
  uint32_t wg = kRouteWorkgroup;
  std::string ranking;
  if (ranks) {
    absl::StatusOr<std::string> glsl = RankingGlsl(c, logits, k, wg);
    if (!glsl.ok()) return glsl.status();
    ranking = *std::move(glsl);
  } else {
    ranking = FloatBuffer(2, "logits", logits.type.dtype, true);
  }
  Kernel out;
  out.family = "router";
  out.variant = absl::StrCat("route_weights.", c.node.attrs.Str("weighting"), ranks ? "+top_k" : "");
  out.glsl = absl::StrCat(ShaderHeader(wg), FloatBuffer(1, "w", graph::DType::kF32, false),
                          IntBuffer(3, "ids", !ranks), ranking,
                          Fill(R"(
const uint E = {{E}}u, K = {{K}}u;
// A chosen expert's logit; an id out of range reads the last expert's rather than past the row.
float chosen(uint row, uint j) { return load_logits(row * E + min({{CHOSEN}}, E - 1u)); }
void route_weights_of(uint row) {
  float mx = uintBitsToFloat(0xFF800000u);
  for (uint e = 0u; e < E; ++e) mx = max(mx, load_logits(row * E + e));
  float sum = 0.0;
  if ({{ALL}}) {
    for (uint e = 0u; e < E; ++e) sum += exp(load_logits(row * E + e) - mx);
  } else {
    for (uint j = 0u; j < K; ++j) sum += exp(chosen(row, j) - mx);
  }
  for (uint j = 0u; j < K; ++j) w[row * K + j] = exp(chosen(row, j) - mx) / sum;
}
)",
                               {{"E", absl::StrCat(experts)},
                                {"K", absl::StrCat(k)},
                                {"CHOSEN", ranks ? "ranked[j]" : "uint(ids[row * K + j])"},
                                {"ALL", over_all ? "true" : "false"}}),
                          Fill(ranks ? R"(
void main() {
  uint row = gl_WorkGroupID.x, lid = gl_LocalInvocationID.x;
  if (row >= {{ROWS}}) return;  // uniform across the workgroup
  rank_experts(row);
  for (uint j = lid; j < K; j += WG) ids[row * K + j] = int(ranked[j]);
  if (lid == 0u) route_weights_of(row);
}
)"
                                     : R"(
void main() {
  uint row = gl_GlobalInvocationID.x;
  if (row < {{ROWS}}) route_weights_of(row);
}
)",
                               {{"ROWS", RowsExpr(logits.type.shape[0].tokens, c.rows(logits))}}));
  out.args = {{c.node.id, true}, {c.node.inputs[0], false}, {c.node.inputs[1], ranks}};
  out.groups = {ranks ? static_cast<uint32_t>(c.rows(logits)) : CeilDiv(c.rows(logits), kRouteWorkgroup), 1, 1};
  return out;
}

// One invocation an element of the sum, the slots in order, then the residual's element where the
// route sum has one.
absl::StatusOr<Kernel> EmitRouteSum(const EmitContext& c) {
  const graph::Node& y = c.input(0);
  const bool residual = c.node.inputs.size() > 2;
  const int64_t slots = c.input(1).type.shape[1].value, width = c.node.type.shape[1].value;
  const int64_t rows = c.rows(y);
  constexpr uint32_t kWorkgroup = 64;
  Kernel k;
  k.family = "router";
  k.variant = "route_sum";
  k.glsl = absl::StrCat(ShaderHeader(kWorkgroup), FloatBuffer(1, "sum", graph::DType::kF32, false),
                        FloatBuffer(2, "y", graph::DType::kF32, true), FloatBuffer(3, "rw", graph::DType::kF32, true),
                        residual ? FloatBuffer(4, "resid", graph::DType::kF32, true) : "", Fill(R"(
const uint S = {{S}}u, N = {{N}}u;
void main() {
  uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  uint t = i / N, col = i % N;
  if (t >= {{ROWS}}) return;
  float total = 0.0;
  for (uint j = 0u; j < S; ++j) total += rw[t * S + j] * y[(t * S + j) * N + col];
  sum[i] = total{{RESIDUAL}};
}
)",
                             {{"RESIDUAL", residual ? " + resid[i]" : ""},
                              {"S", absl::StrCat(slots)},
                              {"N", absl::StrCat(width)},
                              {"ROWS", RowsExpr(y.type.shape[0].tokens, rows)}}));
  k.args = {{c.node.id, true}, {c.node.inputs[0], false}, {c.node.inputs[1], false}};
  if (residual) k.args.push_back({c.node.inputs[2], false});
  k.groups = WideGrid(CeilDiv(rows * width, kWorkgroup));
  return k;
}

}  // namespace doppler::codegen
