#include "codegen/in_matmul.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/tuning/experts.h"
#include "codegen/tuning/gemv.h"
#include "codegen/tuning/tuning.h"
#include "graph/epilogue.h"
#include "graph/layout.h"
#include "graph/rms_norm_inputs.h"

namespace doppler::codegen {
namespace {

// Whether the q8 matrix-vector kernel takes all `rows` rows of x (of k values) in one block of
// rows (an override it cannot take makes the emitter fail, and here says no).
bool OneQ8RowBlock(int64_t rows, int64_t k) {
  absl::StatusOr<tuning::GemvConfig> config = tuning::ChooseGemvQ8(rows, k);
  return rows <= tuning::kGemvRowsLimit && config.ok() && config->rows >= rows;
}

absl::Status ReadRule(const char* key, bool& rule) {
  absl::StatusOr<std::optional<int64_t>> v = tuning::Override("matmul", key);
  if (!v.ok()) return v.status();
  if (!v->has_value()) return absl::OkStatus();
  if (**v != 0 && **v != 1) {
    return absl::InvalidArgumentError(absl::StrCat("DOPPLER_TUNE: matmul.", key, "=", **v, " is not 0 or 1"));
  }
  rule = **v == 1;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<InMatMulRules> InMatMulRulesFromTune() {
  InMatMulRules rules;
  for (auto [key, rule] : {std::pair<const char*, bool*>{"tail", &rules.tail},
                           {"norm_in_x", &rules.norm_in_x},
                           {"plain_norm_in_x", &rules.plain_norm_in_x},
                           {"last_row_in_x", &rules.last_row_in_x},
                           {"route_sum", &rules.route_sum},
                           {"top_k", &rules.top_k},
                           {"half_x", &rules.half_x},
                           {"planes_x", &rules.planes_x}}) {
    if (absl::Status s = ReadRule(key, *rule); !s.ok()) return s;
  }
  absl::StatusOr<int64_t> grouped_from = tuning::ExpertsGroupedFrom();
  if (!grouped_from.ok()) return grouped_from.status();
  rules.experts_grouped_from = *grouped_from;
  absl::StatusOr<int64_t> norm_upto = tuning::PlainNormInExpertsUpTo();
  if (!norm_upto.ok()) return norm_upto.status();
  rules.plain_norm_experts_upto = *norm_upto;
  return rules;
}

bool TailInMatMul(const graph::Graph& g, const graph::Node& n, int64_t tokens, const InMatMulRules& rules) {
  const bool row_wide = n.kind == graph::OpKind::kArgmax ||
                        (n.kind == graph::OpKind::kRmsNorm && !graph::RmsNormInputsOf(n).group);
  if (!rules.tail || !row_wide || NormInX(g, n, tokens, rules) || PlainNormInX(g, n, tokens, rules) ||
      PlainNormInFloatReader(g, n, tokens, rules)) {
    return false;
  }
  const graph::Node& m = g.node(n.inputs[0]);
  if (m.kind != graph::OpKind::kMatMul || !graph::SplitWidths(m).empty() || !m.attrs.Has("x_quant")) return false;
  const graph::Node& x = g.node(m.inputs[0]);
  return OneQ8RowBlock(x.type.shape[0].Resolve(tokens), x.type.shape[1].value);
}

bool NormInX(const graph::Graph& g, const graph::Node& n, int64_t tokens, const InMatMulRules& rules) {
  if (!rules.norm_in_x || n.kind != graph::OpKind::kRmsNorm || graph::RmsNormInputsOf(n).group) return false;
  const std::vector<graph::ValueId> consumers = graph::MatmulsOfNormedPart(g, n.id);
  const int64_t width = n.type.shape[1].value / 2;
  const bool prologue = n.attrs.Has("norm_eps");
  if (consumers.empty()) return false;
  // The first consumer writes the sum (part 0): its readers come after it in the plan's order.
  for (graph::ValueId p : g.Users(n.id)) {
    if (g.node(p).attrs.Int("index") != 0) continue;
    for (graph::ValueId u : g.Users(p)) {
      if (u < consumers.front()) return false;
    }
  }
  return std::all_of(consumers.begin(), consumers.end(), [&](graph::ValueId id) {
    const graph::Node& m = g.node(id);
    const int64_t rows = g.node(m.inputs[0]).type.shape[0].Resolve(tokens);
    if (m.attrs.Has("x_quant")) return OneQ8RowBlock(rows, width) && rows * width * 9 <= 8 * kNormInXStageBytes;
    // The float matrix-vector kernel, at one row (where no other variant takes the product), reads x
    // in vectors of four and computes a norm without a prologue of its own.
    return rows == 1 && width % 4 == 0 && !prologue && graph::IsFloat(g.node(m.inputs[1]).type.dtype);
  });
}

namespace {

// A plain norm's readers at one row of x (codegen/in_matmul.h): whether each reads it once, as x,
// and is a float matmul (the float matrix-vector kernel, no prologue of its own) or an expert
// product taking a row at a time; then whether one is an expert product, and the most weight
// values a token one of them reads.
struct PlainNormReaders {
  bool ok = false;
  bool experts = false;
  int64_t most_expert_values = 0;
  graph::ValueId first = -1;  // the first reader in the graph's order
};
PlainNormReaders ReadersOfPlainNorm(const graph::Graph& g, const graph::Node& n, int64_t tokens,
                                    const InMatMulRules& rules) {
  PlainNormReaders r;
  const graph::RmsNormInputs inputs = graph::RmsNormInputsOf(n);
  const bool is_output = std::any_of(g.outputs().begin(), g.outputs().end(), [&](const auto& o) { return o.second == n.id; });
  if (n.kind != graph::OpKind::kRmsNorm || inputs.group || inputs.residual || inputs.split || is_output ||
      n.type.shape[0].Resolve(tokens) != 1) {
    return r;
  }
  const int64_t width = n.type.shape[1].value;
  for (graph::ValueId u : g.Users(n.id)) {
    const graph::Node& m = g.node(u);
    if (m.inputs.empty() || m.inputs[0] != n.id || std::count(m.inputs.begin(), m.inputs.end(), n.id) != 1) return r;
    if (m.kind == graph::OpKind::kExpertMatMul) {
      // The matrix-vector pass a row, over x rows of the norm's width (not a slot's part each).
      const graph::TensorType& w = g.node(m.inputs[1]).type;
      if (ExpertsGrouped(m, tokens, rules) || w.shape[1].value != width) return r;
      const int64_t slots = g.node(m.inputs[2]).type.shape[1].value;
      r.most_expert_values = std::max(r.most_expert_values,
                                      slots * (w.shape[0].value / m.attrs.Int("experts")) * w.shape[1].value);
      r.experts = true;
    } else if (m.kind == graph::OpKind::kMatMul) {
      // The float matrix-vector kernel, which a row of x takes for float weights.
      if (m.attrs.Has("norm_eps") || m.attrs.Has("x_quant") || !graph::IsFloat(g.node(m.inputs[1]).type.dtype)) return r;
    } else {
      return r;
    }
    if (r.first < 0 || u < r.first) r.first = u;
  }
  r.ok = true;
  return r;
}

}  // namespace

bool PlainNormInX(const graph::Graph& g, const graph::Node& n, int64_t tokens, const InMatMulRules& rules) {
  if (!rules.plain_norm_in_x) return false;
  // Each of the readers' workgroups loads the norm's weight beside x: at 16 rows of Qwen3-30B-A3B
  // that cost more than the tail it saves (hence one row), and on larger expert products more than
  // the norm's level or the router's writing the row (tuning::kPlainNormInExpertsUpTo).
  const PlainNormReaders r = ReadersOfPlainNorm(g, n, tokens, rules);
  return r.ok && r.experts && r.most_expert_values <= rules.plain_norm_experts_upto;
}

bool PlainNormInFloatReader(const graph::Graph& g, const graph::Node& n, int64_t tokens, const InMatMulRules& rules) {
  if (!rules.plain_norm_in_x) return false;
  const PlainNormReaders r = ReadersOfPlainNorm(g, n, tokens, rules);
  return r.ok && r.experts && r.most_expert_values > rules.plain_norm_experts_upto &&
         g.node(r.first).kind == graph::OpKind::kMatMul;
}

bool LastRowInX(const graph::Graph& g, const graph::Node& n, const InMatMulRules& rules) {
  return rules.last_row_in_x && n.kind == graph::OpKind::kLastRow && graph::SoleMatmulOfLastRow(g, n.id).has_value();
}

bool ExpertsGrouped(const graph::Node& n, int64_t tokens, const InMatMulRules& rules) {
  // x rounded through q8 blocks is the matrix-vector pass's alone (runtime/decode_activations.h
  // gives it to steps of few rows).
  return n.kind == graph::OpKind::kExpertMatMul && n.type.shape[0].Resolve(tokens) >= rules.experts_grouped_from &&
         !n.attrs.Has("x_quant");
}

bool RouteSumInExperts(const graph::Graph& g, const graph::Node& n, int64_t tokens, const InMatMulRules& rules) {
  if (!rules.route_sum || n.kind != graph::OpKind::kRouteSum) return false;
  const graph::Node& product = g.node(n.inputs[0]);
  const bool is_output = std::any_of(g.outputs().begin(), g.outputs().end(),
                                     [&](const auto& o) { return o.second == product.id; });
  // The product reads the route weights and the residual: they come before it in the plan's order.
  const bool inputs_before =
      std::all_of(n.inputs.begin() + 1, n.inputs.end(), [&](graph::ValueId v) { return v < product.id; });
  if (product.kind != graph::OpKind::kExpertMatMul || g.Users(product.id).size() != 1 || is_output ||
      ExpertsGrouped(product, tokens, rules) || !inputs_before) {
    return false;
  }
  // The kernel sums the slots' dot products before its epilogue, which must therefore be affine.
  absl::StatusOr<std::vector<graph::EpilogueStep>> steps = graph::ParseEpilogue(product.attrs.Str("epilogue"));
  return steps.ok() && std::all_of(steps->begin(), steps->end(),
                                   [](graph::EpilogueStep s) { return s == graph::EpilogueStep::kBias; });
}

bool TopKInReaders(const graph::Graph& g, const graph::Node& n, int64_t tokens, const InMatMulRules& rules) {
  // Every workgroup of the first product ranks its token's row: at 16 rows of Qwen3-30B-A3B that
  // cost more than top_k's level (hence one row).
  if (!rules.top_k || n.kind != graph::OpKind::kTopK || n.type.shape[0].Resolve(tokens) != 1) return false;
  // The route_weights kernel writes the ids that products read: it comes before them in the plan's
  // order.
  int weights = 0, products = 0;
  graph::ValueId first_product = static_cast<graph::ValueId>(g.nodes().size()), weights_id = -1;
  for (graph::ValueId u : g.Users(n.id)) {
    const graph::Node& m = g.node(u);
    if (m.kind == graph::OpKind::kRouteWeights && m.inputs[0] == n.inputs[0] && m.inputs[1] == n.id) {
      ++weights;
      weights_id = u;
    } else if (m.kind == graph::OpKind::kExpertMatMul && m.inputs[2] == n.id && m.inputs[0] != n.id &&
               !ExpertsGrouped(m, tokens, rules)) {
      ++products;
      first_product = std::min(first_product, u);
    } else {
      return false;
    }
  }
  return weights == 1 && products > 0 && weights_id < first_product;
}

bool RanksItsExperts(const graph::Graph& g, const graph::Node& n, int64_t tokens, const InMatMulRules& rules) {
  if (n.kind != graph::OpKind::kExpertMatMul) return false;
  const graph::Node& top_k = g.node(n.inputs[2]);
  if (!TopKInReaders(g, top_k, tokens, rules)) return false;
  // Whether x depends on the ids: a path up from x reaches the top_k (nodes come after their inputs).
  std::vector<graph::ValueId> todo = {n.inputs[0]};
  std::vector<bool> seen(g.nodes().size(), false);
  while (!todo.empty()) {
    const graph::ValueId id = todo.back();
    todo.pop_back();
    if (id == top_k.id) return false;
    if (id < top_k.id || seen[static_cast<size_t>(id)]) continue;
    seen[static_cast<size_t>(id)] = true;
    for (graph::ValueId in : g.node(id).inputs) todo.push_back(in);
  }
  return true;
}

bool InMatMul(const graph::Graph& g, const graph::Node& n, int64_t tokens, const InMatMulRules& rules) {
  return TailInMatMul(g, n, tokens, rules) || NormInX(g, n, tokens, rules) || PlainNormInX(g, n, tokens, rules) ||
         PlainNormInFloatReader(g, n, tokens, rules) ||
         LastRowInX(g, n, rules) || RouteSumInExperts(g, n, tokens, rules) || TopKInReaders(g, n, tokens, rules);
}

}  // namespace doppler::codegen
