// The mixture-of-experts MLP block (models/blocks.h: MoeSpec), declared with the expert ops of
// graph/op.h. Like the dense MLP it is written unfused; the passes fuse it.
#include "absl/strings/str_cat.h"
#include "models/blocks.h"

namespace doppler::models {
namespace {

using graph::Dim;
using graph::DType;
using graph::TensorType;

// Expert e's matrix [rows, cols] in the model's storage type, or with cols 0 its bias [rows] in f32.
ValueId ExpertParam(GraphBuilder& b, const ExpertTensor& t, int64_t rows, int64_t cols, const BuildOptions& o) {
  if (cols == 0) {
    const TensorType type{DType::kF32, {Dim::Static(rows)}};
    return t.slice ? b.ParamFrom(t.name, type, *t.slice) : Vector(b, t.name, rows);
  }
  return t.slice ? MatrixFrom(b, t.name, *t.slice, rows, cols, o) : Matrix(b, t.name, rows, cols, o);
}

// The experts' matrices (biases: cols 0) named by `name`, stacked into [experts*rows, cols]
// ([experts*rows]); absent (-1) without `name`. A checkpoint that stores the matrices stacked
// (BuildOptions::stacked_experts) gives `stacked`, read as it is; otherwise the experts' own are
// stacked at load, named after expert 0's param, which no other stack shares.
ValueId Stacked(GraphBuilder& b, const MoeSpec& s, const std::function<ExpertTensor(int64_t)>& name,
                const std::string& stacked, int64_t rows, int64_t cols, const BuildOptions& o) {
  if (!name) return -1;
  if (o.stacked_experts && !stacked.empty()) {
    return cols == 0 ? Vector(b, stacked, s.experts * rows) : Matrix(b, stacked, s.experts * rows, cols, o);
  }
  std::vector<ValueId> parts;
  for (int64_t e = 0; e < s.experts; ++e) parts.push_back(ExpertParam(b, name(e), rows, cols, o));
  return b.ConcatRows(parts, "experts(" + name(0).name + ")", "experts.stack");
}

// An expert product with its bias, if it has one.
ValueId ExpertLinear(GraphBuilder& b, ValueId x, ValueId w, ValueId bias, ValueId ids, int64_t experts,
                     std::string_view label) {
  if (bias < 0) return b.ExpertMatMul(x, w, ids, experts, "", label);
  return b.ExpertMatMul(x, w, ids, experts, "bias", label, {bias});
}

// The config key of the expert count: Mixtral's name, else Qwen3-MoE's.
const char* ExpertsKey(const formats::ModelConfig& c) {
  return c.raw.contains("num_local_experts") ? "num_local_experts" : "num_experts";
}

}  // namespace

ValueId MoeMlp(GraphBuilder& b, const MoeSpec& s, ValueId x, int64_t hidden, const BuildOptions& o) {
  // The router stays f32 whatever the experts' type (as llama.cpp keeps ffn_gate_inp): it is small,
  // and a rounded logit could change which experts a token gets.
  ValueId router = b.Param(s.router, TensorType{DType::kF32, {Dim::Static(s.experts), Dim::Static(hidden)}});
  ValueId logits = b.MatMul(x, router, "moe.router");
  if (!s.router_bias.empty()) logits = b.Add(logits, Vector(b, s.router_bias, s.experts), "moe.router.bias");
  ValueId ids = b.TopK(logits, s.top_k, "moe.top_k");
  ValueId weights = b.RouteWeights(logits, ids, s.weighting, "moe.route_weights");
  ValueId wg = Stacked(b, s, s.gate, s.gate_stacked, s.intermediate, hidden, o);
  ValueId wu = Stacked(b, s, s.up, s.up_stacked, s.intermediate, hidden, o);
  ValueId wd = Stacked(b, s, s.down, s.down_stacked, hidden, s.intermediate, o);
  ValueId g = ExpertLinear(b, x, wg, Stacked(b, s, s.gate_bias, s.gate_bias_stacked, s.intermediate, 0, o), ids, s.experts,
                           "moe.gate_proj");
  ValueId u = ExpertLinear(b, x, wu, Stacked(b, s, s.up_bias, s.up_bias_stacked, s.intermediate, 0, o), ids, s.experts,
                           "moe.up_proj");
  ValueId a;
  if (s.clamped_swiglu) {
    a = b.ClampedSwiglu(g, u, s.clamped_swiglu->alpha, s.clamped_swiglu->limit, "moe.gate_mul");
  } else {
    g = s.act == Activation::kGeluTanh ? b.GeluTanh(g, "moe.act") : b.Silu(g, "moe.act");
    a = b.Mul(g, u, "moe.gate_mul");
  }
  ValueId down = ExpertLinear(b, a, wd, Stacked(b, s, s.down_bias, s.down_bias_stacked, hidden, 0, o), ids, s.experts,
                              "moe.down_proj");
  return b.RouteSum(down, weights, "moe.route_sum");
}

int64_t ConfigExpertCount(const formats::ModelConfig& c) {
  absl::StatusOr<int64_t> experts = ConfigCount(c, ExpertsKey(c), 0, int64_t{1} << 30);
  return experts.ok() ? *experts : 0;
}

absl::StatusOr<MoeSpec> ConfigMoe(const formats::ModelConfig& c) {
  const char* experts_key = ExpertsKey(c);
  absl::StatusOr<int64_t> experts = ConfigCount(c, experts_key, 0, int64_t{1} << 30);
  if (!experts.ok()) return experts.status();
  absl::StatusOr<int64_t> top_k = ConfigCount(c, "num_experts_per_tok", 0, *experts);
  if (!top_k.ok()) return top_k.status();
  absl::StatusOr<int64_t> width = ConfigCount(c, "moe_intermediate_size", c.intermediate_size, int64_t{1} << 30);
  if (!width.ok()) return width.status();
  absl::StatusOr<Activation> act = ParseActivation(c.hidden_act);
  if (!act.ok()) return act.status();
  MoeSpec s;
  s.experts = *experts;
  s.top_k = *top_k;
  s.intermediate = *width;
  s.act = *act;
  return s;
}

}  // namespace doppler::models
