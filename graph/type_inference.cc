#include "graph/type_inference.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace doppler::graph {
namespace {

absl::Status Error(OpKind kind, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(OpName(kind), ": ", what));
}

bool IsF32(const TensorType& t) { return t.dtype == DType::kF32; }

// Inputs of a matrix-shaped operand: rank 2 with a static inner dimension.
absl::Status ExpectMatrix(OpKind kind, const char* what, const TensorType& t) {
  if (t.shape.size() != 2 || t.shape[1].tokens) {
    return Error(kind, absl::StrCat(what, " must be [rows, static cols], got ", ToString(t)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TensorType> InferType(const Graph& g, OpKind kind, const std::vector<ValueId>& inputs,
                                     const Attrs& attrs) {
  std::vector<TensorType> in;
  for (ValueId id : inputs) in.push_back(g.node(id).type);
  switch (kind) {
    case OpKind::kInput:
    case OpKind::kParam:
    case OpKind::kConst:
    case OpKind::kState:
      return Error(kind, "sources carry their own type");

    case OpKind::kEmbedding: {
      if (auto s = ExpectMatrix(kind, "table", in[0]); !s.ok()) return s;
      if (in[1].dtype != DType::kI32 || in[1].shape.size() != 1) {
        return Error(kind, absl::StrCat("ids must be i32[T], got ", ToString(in[1])));
      }
      return TensorType{DType::kF32, {in[1].shape[0], in[0].shape[1]}};
    }
    case OpKind::kMatMul: {
      if (auto s = ExpectMatrix(kind, "x", in[0]); !s.ok()) return s;
      if (auto s = ExpectMatrix(kind, "w", in[1]); !s.ok()) return s;
      if (!IsF32(in[0])) return Error(kind, "x must be f32");
      if (in[0].shape[1].value != in[1].shape[1].value) {
        return Error(kind, absl::StrCat("inner dimensions differ: x ", ToString(in[0]), " w ", ToString(in[1])));
      }
      if (in[1].shape[1].value % Info(in[1].dtype).block_elems != 0) {
        return Error(kind, absl::StrCat("w ", ToString(in[1]), ": row length is not a whole number of blocks"));
      }
      return TensorType{DType::kF32, {in[0].shape[0], in[1].shape[0]}};
    }
    case OpKind::kAdd:
    case OpKind::kMul: {
      // b has a's shape, or is a vector of a's row width (broadcast over the rows).
      const bool row_vector = in[0].shape.size() == 2 && in[1].shape.size() == 1 && in[1].shape[0] == in[0].shape[1];
      if ((in[0].shape != in[1].shape && !row_vector) || !IsF32(in[0]) || !IsF32(in[1])) {
        return Error(kind, absl::StrCat("operands must be f32 of one shape (or a [rows, cols] and a [cols] vector), got ",
                                        ToString(in[0]), " and ", ToString(in[1])));
      }
      return in[0];
    }
    case OpKind::kSilu:
    case OpKind::kGeluTanh:
      if (!IsF32(in[0])) return Error(kind, "x must be f32");
      return in[0];
    case OpKind::kScale:
      if (!IsF32(in[0])) return Error(kind, "x must be f32");
      if (!std::isfinite(static_cast<float>(attrs.Float("factor")))) return Error(kind, "factor must be a finite float32");
      return in[0];
    case OpKind::kRmsNorm: {
      if (auto s = ExpectMatrix(kind, "x", in[0]); !s.ok()) return s;
      const int64_t width = in[0].shape[1].value;
      const int64_t group = attrs.Has("group") ? attrs.Int("group") : width;
      if (group <= 0 || width % group != 0) {
        return Error(kind, absl::StrCat("group ", group, " must be a positive divisor of the width ", width));
      }
      if (in[1].shape.size() != 1 || in[1].shape[0] != Dim::Static(group) || !IsFloat(in[1].dtype)) {
        return Error(kind, absl::StrCat("weight must be a float vector of the group size ", group, ", got ",
                                        ToString(in[1])));
      }
      return in[0];
    }
    case OpKind::kRope: {
      if (auto s = ExpectMatrix(kind, "x", in[0]); !s.ok()) return s;
      int64_t heads = attrs.Int("heads"), head_dim = attrs.Int("head_dim");
      const std::string& style = attrs.Str("style");
      if (style != "neox" && style != "interleaved") return Error(kind, "style must be neox or interleaved");
      if (heads <= 0 || head_dim <= 0 || head_dim % 2 != 0 || heads * head_dim != in[0].shape[1].value) {
        return Error(kind, absl::StrCat("heads ", heads, " x head_dim ", head_dim, " does not fit ", ToString(in[0])));
      }
      if (!in[0].shape[0].tokens) return Error(kind, "x rows must be the step's tokens T");
      const Shape& ts = in[1].shape;
      if (ts.size() != 3 || ts[1].value != head_dim / 2 || ts[2].value != 2 || !IsF32(in[1])) {
        return Error(kind, absl::StrCat("table must be f32[positions, head_dim/2, 2], got ", ToString(in[1])));
      }
      return in[0];
    }
    case OpKind::kCacheWrite: {
      if (auto s = ExpectMatrix(kind, "state", in[0]); !s.ok()) return s;
      if (auto s = ExpectMatrix(kind, "x", in[1]); !s.ok()) return s;
      if (in[0].shape[1] != in[1].shape[1] || !in[1].shape[0].tokens || !IsF32(in[1])) {
        return Error(kind, absl::StrCat("x ", ToString(in[1]), " must be f32[T, width of ", ToString(in[0]), "]"));
      }
      if (in[0].dtype != DType::kF32 && in[0].dtype != DType::kF16) return Error(kind, "state must be f32 or f16");
      return in[0];
    }
    case OpKind::kAttention: {
      int64_t heads = attrs.Int("heads"), kv_heads = attrs.Int("kv_heads"), head_dim = attrs.Int("head_dim");
      if (heads <= 0 || kv_heads <= 0 || head_dim <= 0 || heads % kv_heads != 0) {
        return Error(kind, absl::StrCat("heads ", heads, " must be a positive multiple of kv_heads ", kv_heads));
      }
      if (attrs.Int("window") < 0) return Error(kind, "window must be >= 0");
      for (const TensorType& t : in) {
        if (auto s = ExpectMatrix(kind, "operand", t); !s.ok()) return s;
      }
      if (!IsF32(in[0]) || !in[0].shape[0].tokens || in[0].shape[1].value != heads * head_dim) {
        return Error(kind, absl::StrCat("q must be f32[T, heads*head_dim], got ", ToString(in[0])));
      }
      if (in[1].shape != in[2].shape || in[1].shape[1].value != kv_heads * head_dim) {
        return Error(kind, absl::StrCat("k/v caches must be [C, kv_heads*head_dim], got ", ToString(in[1]), " and ",
                                        ToString(in[2])));
      }
      return in[0];
    }
    case OpKind::kLastRow: {
      if (auto s = ExpectMatrix(kind, "x", in[0]); !s.ok()) return s;
      return TensorType{in[0].dtype, {Dim::Static(1), in[0].shape[1]}};
    }
    case OpKind::kRecordTokens: {
      if (in[0].dtype != DType::kI32 || in[0].shape.size() != 1 || in[0].shape[0].tokens ||
          in[1].dtype != DType::kI32 || in[1].shape.size() != 1 || !in[1].shape[0].tokens) {
        return Error(kind, absl::StrCat("needs a history i32[R] and ids i32[T], got ", ToString(in[0]), " and ",
                                        ToString(in[1])));
      }
      return in[0];
    }
    case OpKind::kRepeatPenalty:
    case OpKind::kSample: {
      if (!IsF32(in[0]) || in[0].shape.size() != 2 || in[0].shape[0] != Dim::Static(1)) {
        return Error(kind, absl::StrCat("logits must be f32[1, V], got ", ToString(in[0])));
      }
      if (kind == OpKind::kSample) return TensorType{DType::kI32, {Dim::Static(1)}};
      if (in[1].dtype != DType::kI32 || in[1].shape.size() != 1) {
        return Error(kind, absl::StrCat("history must be i32[R], got ", ToString(in[1])));
      }
      if (attrs.Float("penalty") <= 0.0) return Error(kind, "penalty must be positive");
      return in[0];
    }
    case OpKind::kArgmax: {
      if (auto s = ExpectMatrix(kind, "x", in[0]); !s.ok()) return s;
      if (!IsF32(in[0])) return Error(kind, "x must be f32");
      return TensorType{DType::kI32, {in[0].shape[0]}};
    }
  }
  return Error(kind, "unknown op");
}

}  // namespace doppler::graph
