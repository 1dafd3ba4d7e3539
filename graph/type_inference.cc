#include "graph/type_inference.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "graph/activation_quant.h"
#include "graph/attention_inputs.h"
#include "graph/epilogue.h"
#include "graph/expert_types.h"
#include "graph/layout.h"

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

std::vector<int64_t> SplitWidthsOf(const Attrs& attrs) {
  Node n;
  n.attrs = attrs;
  return SplitWidths(n);
}

// A split attribute, when present, divides the output columns into positive widths.
absl::Status CheckSplit(OpKind kind, const Attrs& attrs, int64_t columns) {
  if (!attrs.Has("split")) return absl::OkStatus();
  int64_t sum = 0;
  for (int64_t w : SplitWidthsOf(attrs)) {
    if (w <= 0) return Error(kind, absl::StrCat("split \"", attrs.Str("split"), "\" has a width that is not positive"));
    sum += w;
  }
  if (sum != columns) {
    return Error(kind, absl::StrCat("split \"", attrs.Str("split"), "\" does not add up to ", columns, " columns"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckGatedActivationAttrs(OpKind kind, const std::vector<EpilogueStep>& steps, const Attrs& attrs) {
  if (std::find(steps.begin(), steps.end(), EpilogueStep::kClampedSwiglu) == steps.end()) return absl::OkStatus();
  const double alpha = attrs.Float("alpha"), limit = attrs.Float("limit");
  if (!attrs.Has("alpha") || !attrs.Has("limit") || !std::isfinite(static_cast<float>(alpha)) ||
      !std::isfinite(static_cast<float>(limit)) || !(limit > 0)) {
    return Error(kind, "clamped_swiglu needs attrs alpha (a finite float32) and limit (positive)");
  }
  return absl::OkStatus();
}

absl::Status CheckXQuant(OpKind kind, const Attrs& attrs, int64_t k) {
  if (!attrs.Has("x_quant")) return absl::OkStatus();
  if (attrs.Str("x_quant") != "q8") return Error(kind, absl::StrCat("x_quant '", attrs.Str("x_quant"), "' is not q8"));
  if (k % kQ8Block != 0) return Error(kind, absl::StrCat("x_quant q8 needs K a multiple of ", kQ8Block, ", got ", k));
  return absl::OkStatus();
}

// Rope of x [T, heads*head_dim] (attrs heads, head_dim, style) with table [positions, head_dim/2, 2].
absl::Status CheckRope(OpKind kind, const Attrs& attrs, const TensorType& x, const TensorType& table) {
  if (auto s = ExpectMatrix(kind, "x", x); !s.ok()) return s;
  const int64_t heads = attrs.Int("heads"), head_dim = attrs.Int("head_dim");
  const std::string& style = attrs.Str("style");
  if (style != "neox" && style != "interleaved") return Error(kind, "style must be neox or interleaved");
  if (heads <= 0 || head_dim <= 0 || head_dim % 2 != 0 || heads * head_dim != x.shape[1].value) {
    return Error(kind, absl::StrCat("heads ", heads, " x head_dim ", head_dim, " does not fit ", ToString(x)));
  }
  if (!x.shape[0].tokens) return Error(kind, "x rows must be the step's tokens T");
  const Shape& ts = table.shape;
  if (ts.size() != 3 || ts[1].value != head_dim / 2 || ts[2].value != 2 || !IsF32(table)) {
    return Error(kind, absl::StrCat("table must be f32[positions, head_dim/2, 2], got ", ToString(table)));
  }
  return absl::OkStatus();
}

// A per-head RMSNorm prologue (before a rope prologue): attrs norm_eps, norm_offset and a weight
// of head_dim floats.
absl::Status CheckHeadNorm(OpKind kind, const Attrs& attrs, const TensorType& w) {
  if (!attrs.Has("norm_eps") || !attrs.Has("norm_offset")) return Error(kind, "a head norm needs norm_eps and norm_offset");
  if (w.shape.size() != 1 || w.shape[0] != Dim::Static(attrs.Int("head_dim")) || !IsFloat(w.dtype)) {
    return Error(kind, absl::StrCat("the head norm's weight must be a float vector of head_dim ", attrs.Int("head_dim"),
                                    ", got ", ToString(w)));
  }
  return absl::OkStatus();
}

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
      absl::StatusOr<std::vector<EpilogueStep>> steps = ParseEpilogue(attrs.Str("epilogue"));
      if (!steps.ok()) return Error(kind, std::string(steps.status().message()));
      int64_t n = in[1].shape[0].value;
      if (IsGated(*steps)) {
        if (n % 2 != 0) return Error(kind, "a gated epilogue needs an even number of weight rows [gate | up]");
        n /= 2;
      }
      // A norm prologue (attr norm_eps) takes the norm's weight [K] as input 2.
      const bool norm = attrs.Has("norm_eps");
      const size_t first_extra = norm ? 3 : 2;
      if (in.size() != first_extra + static_cast<size_t>(ExtraInputs(*steps))) {
        return Error(kind, absl::StrCat(norm ? "the norm weight and " : "", "epilogue '", attrs.Str("epilogue"),
                                        "' take ", first_extra - 2 + ExtraInputs(*steps), " extra inputs, got ",
                                        in.size() - 2));
      }
      if (norm && (in[2].shape != Shape{in[0].shape[1]} || !IsFloat(in[2].dtype))) {
        return Error(kind, absl::StrCat("the norm weight must be a float vector [", in[0].shape[1].value, "], got ",
                                        ToString(in[2])));
      }
      if (absl::Status st = CheckGatedActivationAttrs(kind, *steps, attrs); !st.ok()) return st;
      const TensorType out{DType::kF32, {in[0].shape[0], Dim::Static(n)}};
      size_t next = first_extra;
      int64_t width = in[1].shape[0].value;  // y's width at each step: 2N before a gated step
      for (EpilogueStep s : *steps) {
        if (IsGatedStep(s)) width /= 2;
        if (s == EpilogueStep::kBias && (in[next].shape != Shape{Dim::Static(width)} || !IsFloat(in[next].dtype))) {
          return Error(kind, absl::StrCat("bias must be a float vector [", width, "], got ", ToString(in[next])));
        }
        if (s == EpilogueStep::kAdd && in[next] != out) {
          return Error(kind, absl::StrCat("the added input must be ", ToString(out), ", got ", ToString(in[next])));
        }
        if (s == EpilogueStep::kBias || s == EpilogueStep::kAdd) ++next;
      }
      if (absl::Status st = CheckSplit(kind, attrs, n); !st.ok()) return st;
      if (absl::Status st = CheckXQuant(kind, attrs, in[0].shape[1].value); !st.ok()) return st;
      return out;
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
    case OpKind::kClampedSwiglu:
      if (!IsF32(in[0]) || in[0] != in[1] || in[0].shape.size() != 2) {
        return Error(kind, absl::StrCat("gate and up must be f32 [rows, cols] of one shape, got ", ToString(in[0]),
                                        " and ", ToString(in[1])));
      }
      if (absl::Status st = CheckGatedActivationAttrs(kind, {EpilogueStep::kClampedSwiglu}, attrs); !st.ok()) return st;
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
      if (attrs.Int("residual") == 0) {
        if (in.size() != 2) return Error(kind, "takes (x, w), or (x, w, r) with residual = 1");
        return in[0];
      }
      // A norm prologue (attr norm_eps): x is normalised by its own weight, input 3, before the add.
      const bool prologue = attrs.Has("norm_eps");
      if (in.size() != (prologue ? 4u : 3u) || in[2] != in[0] || group != width) {
        return Error(kind, "with residual = 1 it takes (x, w, r), r of x's type, over whole rows, and with "
                           "norm_eps the prologue's weight after them");
      }
      if (prologue && (in[3].shape != in[1].shape || !IsFloat(in[3].dtype))) {
        return Error(kind, absl::StrCat("the prologue's weight must be a float vector of ", width, " values, got ",
                                        ToString(in[3])));
      }
      if (absl::Status st = CheckSplit(kind, attrs, 2 * width); !st.ok()) return st;
      if (SplitWidthsOf(attrs) != std::vector<int64_t>{width, width}) {
        return Error(kind, absl::StrCat("with residual = 1 the value is split \"", width, ",", width, "\""));
      }
      return TensorType{DType::kF32, {in[0].shape[0], Dim::Static(2 * width)}};
    }
    case OpKind::kPart: {
      const Node& x = g.node(inputs[0]);
      const std::vector<int64_t> widths = SplitWidths(x);
      const int64_t index = attrs.Int("index");
      if (widths.empty()) return Error(kind, "reads a value that is not split");
      if (index < 0 || index >= static_cast<int64_t>(widths.size())) {
        return Error(kind, absl::StrCat("index ", index, " of a value split in ", widths.size()));
      }
      return TensorType{x.type.dtype, {x.type.shape[0], Dim::Static(widths[static_cast<size_t>(index)])}};
    }
    case OpKind::kConcatRows: {
      // Matrices stacked by rows, or vectors (biases) joined end to end.
      int64_t rows = 0;
      const size_t rank = in[0].shape.size();
      for (const TensorType& t : in) {
        if (t.shape.size() != rank || (rank != 1 && rank != 2) || t.shape[0].tokens || t.dtype != in[0].dtype ||
            (rank == 2 && t.shape[1] != in[0].shape[1])) {
          return Error(kind, absl::StrCat("inputs must be weights of one dtype and rank (and row length), got ",
                                          ToString(in[0]), " and ", ToString(t)));
        }
        rows += t.shape[0].value;
      }
      Shape shape = in[0].shape;
      shape[0] = Dim::Static(rows);
      return TensorType{in[0].dtype, shape};
    }
    case OpKind::kRope: {
      if (in.size() != 2) return Error(kind, "takes x and the table");
      if (auto s = CheckRope(kind, attrs, in[0], in[1]); !s.ok()) return s;
      return in[0];
    }
    case OpKind::kCacheWrite: {
      if (auto s = ExpectMatrix(kind, "state", in[0]); !s.ok()) return s;
      // A rope prologue: the table as a third input, and rope's attrs; after it, a per-head norm
      // prologue (attr norm_eps): the norm's weight as a fourth input.
      if (in.size() > 4) return Error(kind, "takes the state, x, optionally a rope table and then a head norm's weight");
      if (in.size() >= 3) {
        if (auto s = CheckRope(kind, attrs, in[1], in[2]); !s.ok()) return s;
      }
      if (in.size() == 4) {
        if (auto s = CheckHeadNorm(kind, attrs, in[3]); !s.ok()) return s;
      }
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
      if (in.size() < 3) return Error(kind, "takes q and the k and v caches");
      for (size_t i = 0; i < 3; ++i) {
        if (auto s = ExpectMatrix(kind, "operand", in[i]); !s.ok()) return s;
      }
      if (!IsF32(in[0]) || !in[0].shape[0].tokens || in[0].shape[1].value != heads * head_dim) {
        return Error(kind, absl::StrCat("q must be f32[T, heads*head_dim], got ", ToString(in[0])));
      }
      // Appending (attr append, graph/attention_inputs.h): the step's keys and values, then with
      // attr k_norm_eps the keys' head norm weight, after the other inputs.
      const bool append = AppendedInputCount(attrs) > 0, k_norm = AppendedInputCount(attrs) == 3;
      // With attr sinks = 1, the heads' sink logits after all the others.
      const size_t sinks = attrs.Int("sinks") == 1 ? 1 : 0;
      const size_t trailing = AppendedInputCount(attrs) + sinks;
      if (in.size() < 3 + trailing || in.size() > 5 + trailing) {
        return Error(kind, "takes q, the k and v caches, optionally a rope table and then a head norm's weight, "
                           "when appending the new keys and values and optionally the keys' head norm weight, and "
                           "with sinks the heads' sink logits");
      }
      if (sinks == 1 && (in.back().shape != Shape{Dim::Static(heads)} || !IsF32(in.back()))) {
        return Error(kind, absl::StrCat("the sinks must be f32[", heads, "], got ", ToString(in.back())));
      }
      const size_t base = in.size() - trailing;
      // A rope prologue for q: the table as a fourth input, and attr style; after it, a per-head
      // norm prologue (attr norm_eps): the norm's weight as a fifth input.
      if (base >= 4) {
        if (auto s = CheckRope(kind, attrs, in[0], in[3]); !s.ok()) return s;
      }
      if (base == 5) {
        if (auto s = CheckHeadNorm(kind, attrs, in[4]); !s.ok()) return s;
      }
      if (in[1].shape != in[2].shape || in[1].shape[1].value != kv_heads * head_dim) {
        return Error(kind, absl::StrCat("k/v caches must be [C, kv_heads*head_dim], got ", ToString(in[1]), " and ",
                                        ToString(in[2])));
      }
      if (append) {
        for (size_t i = base; i < base + 2; ++i) {
          if (auto s = ExpectMatrix(kind, "new keys or values", in[i]); !s.ok()) return s;
          if (!IsF32(in[i]) || !in[i].shape[0].tokens || in[i].shape[1] != in[1].shape[1]) {
            return Error(kind, absl::StrCat("new keys and values must be f32[T, width of the caches ",
                                            ToString(in[1]), "], got ", ToString(in[i])));
          }
        }
        if (k_norm && base < 4) return Error(kind, "a head norm of the new keys needs the rope prologue");
        if (k_norm) {
          if (!attrs.Has("k_norm_offset")) return Error(kind, "a head norm of the new keys needs k_norm_offset");
          Attrs k_attrs;
          k_attrs.Set("head_dim", head_dim);
          k_attrs.Set("norm_eps", attrs.Float("k_norm_eps"));
          k_attrs.Set("norm_offset", attrs.Float("k_norm_offset"));
          if (auto s = CheckHeadNorm(kind, k_attrs, in[base + 2]); !s.ok()) return s;
        }
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
    case OpKind::kTopK:
    case OpKind::kRouteWeights:
    case OpKind::kExpertMatMul:
    case OpKind::kRouteSum:
      return InferExpertOpType(kind, in, attrs);
    case OpKind::kArgmax: {
      if (auto s = ExpectMatrix(kind, "x", in[0]); !s.ok()) return s;
      if (!IsF32(in[0])) return Error(kind, "x must be f32");
      return TensorType{DType::kI32, {in[0].shape[0]}};
    }
  }
  return Error(kind, "unknown op");
}

}  // namespace doppler::graph
