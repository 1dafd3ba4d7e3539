#include "graph/expert_types.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "graph/epilogue.h"
#include "graph/type_inference.h"

namespace doppler::graph {
namespace {

absl::Status Error(OpKind kind, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(OpName(kind), ": ", what));
}

// [T, static cols] of `dtype`.
bool IsRowsOf(const TensorType& t, DType dtype) {
  return t.dtype == dtype && t.shape.size() == 2 && t.shape[0].tokens && !t.shape[1].tokens;
}

// Expert ids i32[T, k]; returns k.
absl::StatusOr<int64_t> ExpertIds(OpKind kind, const TensorType& ids) {
  if (!IsRowsOf(ids, DType::kI32) || ids.shape[1].value < 1) {
    return Error(kind, absl::StrCat("expert ids must be i32[T, k], got ", ToString(ids)));
  }
  return ids.shape[1].value;
}

absl::StatusOr<TensorType> ExpertMatMulType(const std::vector<TensorType>& in, const Attrs& attrs) {
  constexpr OpKind kind = OpKind::kExpertMatMul;
  absl::StatusOr<std::vector<EpilogueStep>> steps = ParseEpilogue(attrs.Str("epilogue"));
  if (!steps.ok()) return Error(kind, std::string(steps.status().message()));
  if (std::find(steps->begin(), steps->end(), EpilogueStep::kAdd) != steps->end()) {
    return Error(kind, "an expert product's epilogue takes no add steps");
  }
  const size_t first_extra = 3;
  if (in.size() != first_extra + static_cast<size_t>(ExtraInputs(*steps))) {
    return Error(kind, "takes (x, w, ids), then a bias for each bias step of its epilogue");
  }
  absl::StatusOr<int64_t> k = ExpertIds(kind, in[2]);
  if (!k.ok()) return k.status();
  const TensorType& w = in[1];
  const int64_t experts = attrs.Int("experts");
  if (w.shape.size() != 2 || w.shape[0].tokens || experts < 1 || w.shape[0].value % experts != 0) {
    return Error(kind, absl::StrCat("w must be a stacked weight [experts*N, K] of ", experts, " experts, got ",
                                    ToString(w)));
  }
  const int64_t kdim = w.shape[1].value;
  if (kdim % Info(w.dtype).block_elems != 0) {
    return Error(kind, absl::StrCat("w ", ToString(w), ": row length is not a whole number of blocks"));
  }
  const TensorType& x = in[0];
  if (!IsRowsOf(x, DType::kF32) || (x.shape[1].value != kdim && x.shape[1].value != *k * kdim)) {
    return Error(kind, absl::StrCat("x must be f32[T, K] or f32[T, k*K] with K ", kdim, " and k ", *k, ", got ",
                                    ToString(x)));
  }
  if (absl::Status st = CheckGatedActivationAttrs(kind, *steps, attrs); !st.ok()) return st;
  if (absl::Status st = CheckXQuant(kind, attrs, kdim); !st.ok()) return st;
  int64_t n = w.shape[0].value / experts;
  if (IsGated(*steps) && n % 2 != 0) {
    return Error(kind, "a gated epilogue needs an even number of rows per expert [gate | up]");
  }
  // Each bias step's input: every expert's bias of y's width at that step, expert after expert.
  size_t next = first_extra;
  for (EpilogueStep s : *steps) {
    if (IsGatedStep(s)) n /= 2;
    if (s != EpilogueStep::kBias) continue;
    if (in[next].shape != Shape{Dim::Static(experts * n)} || !IsFloat(in[next].dtype)) {
      return Error(kind, absl::StrCat("a bias step takes every expert's bias, a float vector [", experts, "*", n,
                                      "], got ", ToString(in[next])));
    }
    ++next;
  }
  return TensorType{DType::kF32, {x.shape[0], Dim::Static(*k * n)}};
}

// (y f32[T, k*N], weights f32[T, k][, residual f32[T, N]]) -> f32[T, N].
absl::StatusOr<TensorType> RouteSumType(const std::vector<TensorType>& in) {
  constexpr OpKind kind = OpKind::kRouteSum;
  const TensorType &y = in[0], &w = in[1];
  if (!IsRowsOf(w, DType::kF32) || w.shape[1].value < 1) {
    return Error(kind, absl::StrCat("the route weights must be f32[T, k], got ", ToString(w)));
  }
  const int64_t k = w.shape[1].value;
  if (!IsRowsOf(y, DType::kF32) || y.shape[0] != w.shape[0] || y.shape[1].value % k != 0) {
    return Error(kind, absl::StrCat("y must be f32[T, k*N] with the route weights' T and k ", k, ", got ", ToString(y)));
  }
  const TensorType out{DType::kF32, {y.shape[0], Dim::Static(y.shape[1].value / k)}};
  if (in.size() > 3) {
    return Error(kind, absl::StrCat("takes y, the route weights and a residual, got ", in.size(), " inputs"));
  }
  if (in.size() == 3 && in[2] != out) {
    return Error(kind, absl::StrCat("the residual must be ", ToString(out), ", got ", ToString(in[2])));
  }
  return out;
}

}  // namespace

bool IsRouteWeighting(const std::string& weighting) {
  return weighting == "softmax_chosen" || weighting == "softmax_all";
}

absl::StatusOr<TensorType> InferExpertOpType(OpKind kind, const std::vector<TensorType>& in, const Attrs& attrs) {
  switch (kind) {
    case OpKind::kTopK: {
      const int64_t k = attrs.Int("k");
      if (!IsRowsOf(in[0], DType::kF32)) return Error(kind, absl::StrCat("x must be f32[T, E], got ", ToString(in[0])));
      if (k < 1 || k > in[0].shape[1].value) {
        return Error(kind, absl::StrCat("k ", k, " must be between 1 and the row length ", in[0].shape[1].value));
      }
      return TensorType{DType::kI32, {in[0].shape[0], Dim::Static(k)}};
    }
    case OpKind::kRouteWeights: {
      if (!IsRowsOf(in[0], DType::kF32)) {
        return Error(kind, absl::StrCat("logits must be f32[T, E], got ", ToString(in[0])));
      }
      absl::StatusOr<int64_t> k = ExpertIds(kind, in[1]);
      if (!k.ok()) return k.status();
      if (*k > in[0].shape[1].value) {
        return Error(kind, absl::StrCat(*k, " chosen experts of ", in[0].shape[1].value));
      }
      if (!IsRouteWeighting(attrs.Str("weighting"))) {
        return Error(kind, absl::StrCat("weighting '", attrs.Str("weighting"), "' is not softmax_chosen or softmax_all"));
      }
      return TensorType{DType::kF32, {in[0].shape[0], Dim::Static(*k)}};
    }
    case OpKind::kExpertMatMul:
      return ExpertMatMulType(in, attrs);
    case OpKind::kRouteSum:
      return RouteSumType(in);
    default:
      return Error(kind, "is not an expert op");
  }
}

}  // namespace doppler::graph
