#include "graph/builder.h"

#include "absl/strings/str_cat.h"
#include "graph/type_inference.h"
#include "graph/verifier.h"

namespace doppler::graph {

std::string GraphBuilder::Label(std::string_view name) const {
  return scope_.empty() ? std::string(name) : absl::StrCat(scope_, ".", std::string(name));
}

ValueId GraphBuilder::Source(OpKind kind, const std::string& name, TensorType type) {
  if (!status_.ok()) return -1;
  return graph_.AddNode(kind, {}, Attrs{{"name", name}}, std::move(type), name);
}

ValueId GraphBuilder::Compute(OpKind kind, std::vector<ValueId> inputs, Attrs attrs, std::string_view label) {
  if (!status_.ok()) return -1;
  for (ValueId id : inputs) {
    if (id < 0 || id >= graph_.size()) {
      status_ = absl::InvalidArgumentError(absl::StrCat(Label(label), ": input value ", id, " does not exist"));
      return -1;
    }
  }
  absl::StatusOr<TensorType> type = InferType(graph_, kind, inputs, attrs);
  if (!type.ok()) {
    status_ = absl::InvalidArgumentError(absl::StrCat(Label(label), ": ", type.status().message()));
    return -1;
  }
  return graph_.AddNode(kind, std::move(inputs), std::move(attrs), *std::move(type), Label(label));
}

ValueId GraphBuilder::Input(const std::string& name, TensorType type) {
  return Source(OpKind::kInput, name, std::move(type));
}
ValueId GraphBuilder::Param(const std::string& name, TensorType type) {
  return Source(OpKind::kParam, name, std::move(type));
}
ValueId GraphBuilder::ParamFrom(const std::string& name, TensorType type, const ParamSlice& slice) {
  ValueId id = Source(OpKind::kParam, name, std::move(type));
  if (id < 0) return id;
  Node& n = graph_.mutable_node(id);
  SetParamSlice(slice, n.attrs);
  if (absl::Status s = CheckParamSlice(n); !s.ok()) {
    status_ = absl::InvalidArgumentError(absl::StrCat("param ", name, " (", ToString(n.type), " from ", slice.source,
                                                      "): ", s.message()));
    return -1;
  }
  return id;
}
ValueId GraphBuilder::State(const std::string& name, TensorType type) {
  return Source(OpKind::kState, name, std::move(type));
}
ValueId GraphBuilder::Const(const std::string& name, TensorType type, std::shared_ptr<const std::vector<float>> data) {
  if (status_.ok() && static_cast<int64_t>(data->size()) != NumElements(type.shape, 0)) {
    status_ = absl::InvalidArgumentError(
        absl::StrCat("const ", name, ": ", data->size(), " values for shape ", ToString(type.shape)));
  }
  ValueId id = Source(OpKind::kConst, name, std::move(type));
  if (id >= 0) graph_.SetConstData(name, std::move(data));
  return id;
}

ValueId GraphBuilder::Embedding(ValueId table, ValueId ids, std::string_view label) {
  return Compute(OpKind::kEmbedding, {table, ids}, {}, label);
}
ValueId GraphBuilder::MatMul(ValueId x, ValueId w, std::string_view label) {
  return Compute(OpKind::kMatMul, {x, w}, {}, label);
}
ValueId GraphBuilder::Add(ValueId a, ValueId b, std::string_view label) {
  return Compute(OpKind::kAdd, {a, b}, {}, label);
}
ValueId GraphBuilder::Mul(ValueId a, ValueId b, std::string_view label) {
  return Compute(OpKind::kMul, {a, b}, {}, label);
}
ValueId GraphBuilder::Silu(ValueId x, std::string_view label) { return Compute(OpKind::kSilu, {x}, {}, label); }
ValueId GraphBuilder::GeluTanh(ValueId x, std::string_view label) { return Compute(OpKind::kGeluTanh, {x}, {}, label); }
ValueId GraphBuilder::ClampedSwiglu(ValueId gate, ValueId up, double alpha, double limit, std::string_view label) {
  return Compute(OpKind::kClampedSwiglu, {gate, up}, {{"alpha", alpha}, {"limit", limit}}, label);
}
ValueId GraphBuilder::Scale(ValueId x, double factor, std::string_view label) {
  return Compute(OpKind::kScale, {x}, {{"factor", factor}}, label);
}
ValueId GraphBuilder::RmsNorm(ValueId x, ValueId w, double eps, double weight_offset, std::string_view label) {
  return Compute(OpKind::kRmsNorm, {x, w}, {{"eps", eps}, {"weight_offset", weight_offset}}, label);
}
ValueId GraphBuilder::GroupRmsNorm(ValueId x, ValueId w, int64_t group, double eps, double weight_offset,
                                   std::string_view label) {
  return Compute(OpKind::kRmsNorm, {x, w}, {{"eps", eps}, {"weight_offset", weight_offset}, {"group", group}}, label);
}
ValueId GraphBuilder::Rope(ValueId x, ValueId table, int64_t heads, int64_t head_dim, const std::string& style,
                           std::string_view label) {
  return Compute(OpKind::kRope, {x, table}, {{"heads", heads}, {"head_dim", head_dim}, {"style", style}}, label);
}
ValueId GraphBuilder::CacheWrite(ValueId state, ValueId x, std::string_view label) {
  return Compute(OpKind::kCacheWrite, {state, x}, {}, label);
}
ValueId GraphBuilder::Attention(ValueId q, ValueId k_cache, ValueId v_cache, int64_t heads, int64_t kv_heads,
                                int64_t head_dim, double scale, int64_t window, std::string_view label, ValueId sinks) {
  std::vector<ValueId> inputs = {q, k_cache, v_cache};
  Attrs attrs{{"heads", heads}, {"kv_heads", kv_heads}, {"head_dim", head_dim}, {"scale", scale}, {"window", window}};
  if (sinks >= 0) {
    inputs.push_back(sinks);
    attrs.Set("sinks", int64_t{1});
  }
  return Compute(OpKind::kAttention, std::move(inputs), std::move(attrs), label);
}
ValueId GraphBuilder::LastRow(ValueId x, std::string_view label) { return Compute(OpKind::kLastRow, {x}, {}, label); }
ValueId GraphBuilder::Argmax(ValueId x, std::string_view label) { return Compute(OpKind::kArgmax, {x}, {}, label); }

ValueId GraphBuilder::RecordTokens(ValueId history, ValueId ids, std::string_view label) {
  return Compute(OpKind::kRecordTokens, {history, ids}, {}, label);
}
ValueId GraphBuilder::RepeatPenalty(ValueId logits, ValueId history, double penalty, std::string_view label) {
  return Compute(OpKind::kRepeatPenalty, {logits, history}, {{"penalty", penalty}}, label);
}
ValueId GraphBuilder::Sample(ValueId logits, double temperature, int64_t top_k, double top_p, double min_p,
                             int64_t seed, std::string_view label) {
  return Compute(OpKind::kSample, {logits},
                 {{"temperature", temperature}, {"top_k", top_k}, {"top_p", top_p}, {"min_p", min_p}, {"seed", seed}},
                 label);
}

ValueId GraphBuilder::MatMulFused(ValueId x, ValueId w, const std::vector<ValueId>& extras,
                                  const std::string& epilogue, const std::string& split, std::string_view label) {
  std::vector<ValueId> inputs = {x, w};
  inputs.insert(inputs.end(), extras.begin(), extras.end());
  Attrs attrs;
  if (!epilogue.empty()) attrs.Set("epilogue", epilogue);
  if (!split.empty()) attrs.Set("split", split);
  return Compute(OpKind::kMatMul, std::move(inputs), std::move(attrs), label);
}
ValueId GraphBuilder::MatMulWithNorm(ValueId x, ValueId gamma, double eps, double weight_offset, ValueId w,
                                     const std::vector<ValueId>& extras, const std::string& epilogue,
                                     std::string_view label) {
  std::vector<ValueId> inputs = {x, w, gamma};
  inputs.insert(inputs.end(), extras.begin(), extras.end());
  Attrs attrs;
  if (!epilogue.empty()) attrs.Set("epilogue", epilogue);
  attrs.Set("norm_eps", eps);
  attrs.Set("norm_offset", weight_offset);
  return Compute(OpKind::kMatMul, std::move(inputs), std::move(attrs), label);
}
ValueId GraphBuilder::RmsNormResidual(ValueId x, ValueId w, ValueId r, double eps, double weight_offset,
                                      std::string_view label) {
  if (!status_.ok()) return -1;
  if (x < 0 || x >= graph_.size() || graph_.node(x).type.shape.size() != 2) {
    status_ = absl::InvalidArgumentError(absl::StrCat(Label(label), ": x must be an existing [T, D] value"));
    return -1;
  }
  const int64_t d = graph_.node(x).type.shape[1].value;
  return Compute(OpKind::kRmsNorm, {x, w, r},
                 {{"eps", eps}, {"weight_offset", weight_offset}, {"residual", int64_t{1}},
                  {"split", absl::StrCat(d, ",", d)}},
                 label);
}
ValueId GraphBuilder::Part(ValueId x, int64_t index, std::string_view label) {
  return Compute(OpKind::kPart, {x}, {{"index", index}}, label);
}
ValueId GraphBuilder::ConcatRows(const std::vector<ValueId>& weights, const std::string& name,
                                 std::string_view label) {
  return Compute(OpKind::kConcatRows, weights, {{"name", name}}, label);
}

ValueId GraphBuilder::TopK(ValueId x, int64_t k, std::string_view label) {
  return Compute(OpKind::kTopK, {x}, {{"k", k}}, label);
}
ValueId GraphBuilder::RouteWeights(ValueId logits, ValueId ids, const std::string& weighting, std::string_view label) {
  return Compute(OpKind::kRouteWeights, {logits, ids}, {{"weighting", weighting}}, label);
}
ValueId GraphBuilder::ExpertMatMul(ValueId x, ValueId w, ValueId ids, int64_t experts, const std::string& epilogue,
                                   std::string_view label, const std::vector<ValueId>& biases, const Attrs& more) {
  std::vector<ValueId> inputs = {x, w, ids};
  Attrs attrs = more;
  attrs.Set("experts", experts);
  if (!epilogue.empty()) attrs.Set("epilogue", epilogue);
  inputs.insert(inputs.end(), biases.begin(), biases.end());
  return Compute(OpKind::kExpertMatMul, std::move(inputs), std::move(attrs), label);
}
ValueId GraphBuilder::RouteSum(ValueId y, ValueId weights, std::string_view label) {
  return Compute(OpKind::kRouteSum, {y, weights}, {}, label);
}

void GraphBuilder::Output(const std::string& name, ValueId id) {
  if (status_.ok()) graph_.SetOutput(name, id);
}

absl::StatusOr<Graph> GraphBuilder::Finish() && {
  if (!status_.ok()) return status_;
  if (absl::Status s = Verify(graph_); !s.ok()) return s;
  return std::move(graph_);
}

}  // namespace doppler::graph
