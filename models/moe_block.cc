// The mixture-of-experts MLP block (models/blocks.h: MoeSpec), declared with the expert ops of
// graph/op.h. Like the dense MLP it is written unfused; the passes fuse it.
#include "absl/strings/str_cat.h"
#include "models/blocks.h"

namespace doppler::models {
namespace {

using graph::Dim;
using graph::DType;
using graph::TensorType;

// The experts' matrices, each [rows, cols], stacked into [experts*rows, cols]: the stored stacked
// weight, or the experts' own matrices (`name`) stacked at load.
ValueId Stacked(GraphBuilder& b, const MoeSpec& s, const std::function<std::string(int64_t)>& name,
                const std::string& stacked, int64_t rows, int64_t cols, const BuildOptions& o) {
  if (o.stacked_experts) return Matrix(b, stacked, s.experts * rows, cols, o);
  std::vector<ValueId> matrices;
  for (int64_t e = 0; e < s.experts; ++e) matrices.push_back(Matrix(b, name(e), rows, cols, o));
  // Named after expert 0's tensor, which no other stack shares.
  return b.ConcatRows(matrices, "experts(" + name(0) + ")", "experts.stack");
}

// The config key of the expert count: Mixtral's name, else Qwen3-MoE's.
const char* ExpertsKey(const ModelConfig& c) {
  return c.raw.contains("num_local_experts") ? "num_local_experts" : "num_experts";
}

}  // namespace

ValueId MoeMlp(GraphBuilder& b, const MoeSpec& s, ValueId x, int64_t hidden, const BuildOptions& o) {
  // The router stays f32 whatever the experts' type (as llama.cpp keeps ffn_gate_inp): it is small,
  // and a rounded logit could change which experts a token gets.
  ValueId router = b.Param(s.router, TensorType{DType::kF32, {Dim::Static(s.experts), Dim::Static(hidden)}});
  ValueId logits = b.MatMul(x, router, "moe.router");
  ValueId ids = b.TopK(logits, s.top_k, "moe.top_k");
  ValueId weights = b.RouteWeights(logits, ids, s.weighting, "moe.route_weights");
  ValueId wg = Stacked(b, s, s.gate, s.gate_stacked, s.intermediate, hidden, o);
  ValueId wu = Stacked(b, s, s.up, s.up_stacked, s.intermediate, hidden, o);
  ValueId wd = Stacked(b, s, s.down, s.down_stacked, hidden, s.intermediate, o);
  ValueId g = b.ExpertMatMul(x, wg, ids, s.experts, "", -1, "moe.gate_proj");
  ValueId u = b.ExpertMatMul(x, wu, ids, s.experts, "", -1, "moe.up_proj");
  g = s.act == Activation::kGeluTanh ? b.GeluTanh(g, "moe.act") : b.Silu(g, "moe.act");
  return b.ExpertMatMul(b.Mul(g, u, "moe.gate_mul"), wd, ids, s.experts, "", weights, "moe.down_proj");
}

int64_t ConfigExpertCount(const ModelConfig& c) {
  absl::StatusOr<double> experts = ConfigNumber(c, ExpertsKey(c), 0);
  return experts.ok() && *experts >= 1 && *experts < (1 << 30) && *experts == static_cast<int64_t>(*experts)
             ? static_cast<int64_t>(*experts)
             : 0;
}

absl::StatusOr<MoeSpec> ConfigMoe(const ModelConfig& c) {
  const char* experts_key = ExpertsKey(c);
  absl::StatusOr<double> experts = ConfigNumber(c, experts_key, 0);
  if (!experts.ok()) return experts.status();
  absl::StatusOr<double> top_k = ConfigNumber(c, "num_experts_per_tok", 0);
  if (!top_k.ok()) return top_k.status();
  absl::StatusOr<double> width = ConfigNumber(c, "moe_intermediate_size", static_cast<double>(c.intermediate_size));
  if (!width.ok()) return width.status();
  if (*experts < 1 || *experts != static_cast<int64_t>(*experts)) {
    return absl::InvalidArgumentError(absl::StrCat("config: ", experts_key, " must be a positive integer"));
  }
  if (*top_k < 1 || *top_k > *experts || *top_k != static_cast<int64_t>(*top_k)) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: num_experts_per_tok must be an integer between 1 and ", experts_key, " (", *experts, ")"));
  }
  if (*width < 1 || *width != static_cast<int64_t>(*width)) {
    return absl::InvalidArgumentError("config: the experts' intermediate size must be a positive integer");
  }
  absl::StatusOr<Activation> act = ParseActivation(c.hidden_act);
  if (!act.ok()) return act.status();
  MoeSpec s;
  s.experts = static_cast<int64_t>(*experts);
  s.top_k = static_cast<int64_t>(*top_k);
  s.intermediate = static_cast<int64_t>(*width);
  s.act = *act;
  return s;
}

}  // namespace doppler::models
