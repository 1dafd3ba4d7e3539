#include "graph/op.h"

#include <array>

namespace doppler::graph {
namespace {

using A = AttrType;

const std::vector<OpDef>& Defs() {
  static const std::vector<OpDef> defs = {
      {OpKind::kInput, "input", 0, {{"name", A::kString}}},
      {OpKind::kParam, "param", 0, {{"name", A::kString}}},
      {OpKind::kConst, "const", 0, {{"name", A::kString}}},
      {OpKind::kState, "state", 0, {{"name", A::kString}}},
      {OpKind::kEmbedding, "embedding", 2, {}},
      {OpKind::kMatMul, "matmul", 2, {}, false, /*variadic=*/true},
      {OpKind::kAdd, "add", 2, {}},
      {OpKind::kMul, "mul", 2, {}},
      {OpKind::kSilu, "silu", 1, {}},
      {OpKind::kRmsNorm, "rms_norm", 2, {{"eps", A::kFloat}, {"weight_offset", A::kFloat}}, false, /*variadic=*/true},
      {OpKind::kRope, "rope", 2, {{"heads", A::kInt}, {"head_dim", A::kInt}, {"style", A::kString}}},
      {OpKind::kCacheWrite, "cache_write", 2, {}, /*updates_input0=*/true, /*variadic=*/true},
      {OpKind::kAttention,
       "attention",
       3,
       {{"heads", A::kInt}, {"kv_heads", A::kInt}, {"head_dim", A::kInt}, {"scale", A::kFloat}, {"window", A::kInt}},
       false,
       /*variadic=*/true},
      {OpKind::kLastRow, "last_row", 1, {}},
      {OpKind::kArgmax, "argmax", 1, {}},
      {OpKind::kRecordTokens, "record_tokens", 2, {}, /*updates_input0=*/true},
      {OpKind::kRepeatPenalty, "repeat_penalty", 2, {{"penalty", A::kFloat}}},
      {OpKind::kSample,
       "sample",
       1,
       {{"temperature", A::kFloat}, {"top_k", A::kInt}, {"top_p", A::kFloat}, {"min_p", A::kFloat}, {"seed", A::kInt}}},
      {OpKind::kGeluTanh, "gelu_tanh", 1, {}},
      {OpKind::kScale, "scale", 1, {{"factor", A::kFloat}}},
      {OpKind::kPart, "part", 1, {{"index", A::kInt}}},
      {OpKind::kConcatRows, "concat_rows", 2, {{"name", A::kString}}, false, /*variadic=*/true},
      {OpKind::kTopK, "top_k", 1, {{"k", A::kInt}}},
      {OpKind::kRouteWeights, "route_weights", 2, {{"weighting", A::kString}}},
      {OpKind::kExpertMatMul, "expert_matmul", 3, {{"experts", A::kInt}}, false, /*variadic=*/true},
      {OpKind::kClampedSwiglu, "clamped_swiglu", 2, {{"alpha", A::kFloat}, {"limit", A::kFloat}}},
      {OpKind::kRouteSum, "route_sum", 2, {}, false, /*variadic=*/true},
  };
  return defs;
}

}  // namespace

const OpDef& GetOpDef(OpKind kind) { return Defs()[static_cast<size_t>(kind)]; }
const char* OpName(OpKind kind) { return GetOpDef(kind).name; }

int64_t Attrs::Int(std::string_view name) const {
  auto it = values_.find(std::string(name));
  if (it == values_.end()) return 0;
  if (const int64_t* v = std::get_if<int64_t>(&it->second)) return *v;
  return 0;
}

double Attrs::Float(std::string_view name) const {
  auto it = values_.find(std::string(name));
  if (it == values_.end()) return 0.0;
  if (const double* v = std::get_if<double>(&it->second)) return *v;
  if (const int64_t* v = std::get_if<int64_t>(&it->second)) return static_cast<double>(*v);
  return 0.0;
}

const std::string& Attrs::Str(std::string_view name) const {
  static const std::string empty;
  auto it = values_.find(std::string(name));
  if (it == values_.end()) return empty;
  if (const std::string* v = std::get_if<std::string>(&it->second)) return *v;
  return empty;
}

}  // namespace doppler::graph
