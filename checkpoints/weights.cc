#include "checkpoints/weights.h"

#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/param_slice.h"
#include "quant/float_codec.h"
#include "quant/quant.h"

namespace doppler::checkpoints {
using graph::DType;

absl::StatusOr<formats::TensorView> ParamTensor(const formats::WeightStore& store, const graph::Node& param) {
  // A param with a "source" lies inside that checkpoint tensor (graph/param_slice.h), whose shape
  // the slice implies (e.g. Phi-3's fused qkv_proj, GPT-OSS's stacked experts).
  const std::optional<graph::ParamSlice> slice = graph::ParamSliceOf(param);
  const std::string& name = slice ? slice->source : param.attrs.Str("name");
  absl::StatusOr<formats::TensorView> t = store.Get(name);
  if (!t.ok()) return t.status();
  const std::vector<int64_t> param_shape = graph::Resolve(param.type.shape, 0);
  const std::vector<int64_t> want = slice ? graph::StoredShape(*slice, param_shape) : param_shape;
  if (t->shape != want) {
    std::string what = absl::StrCat("[", absl::StrJoin(want, ", "), "]");
    if (slice) {
      absl::StrAppend(&what, " (", param.attrs.Str("name"), " lies in it: rows from ", slice->row_offset,
                      slice->row_stride != 1 ? absl::StrCat(" every ", slice->row_stride) : "",
                      slice->source_experts > 0 ? absl::StrCat(" of expert ", slice->expert) : "", ")");
    }
    return absl::InvalidArgumentError(absl::StrCat(t->file, ": tensor '", t->name, "' has shape [",
                                                   absl::StrJoin(t->shape, ", "), "] but the config implies ", what));
  }
  return t;
}

namespace {

// The values of a param that lies inside the stored tensor t (ParamTensor checked its shape), as
// stored bytes of t's dtype: whole rows of it, or for an in_out slice the transposed columns,
// decoded to float32 (its stored matrices' rows would be the param's columns).
absl::StatusOr<std::pair<DType, std::vector<uint8_t>>> SliceBytes(const formats::TensorView& t, const graph::ParamSlice& s,
                                                                   const std::vector<int64_t>& param_shape) {
  const int64_t rows = param_shape[0], cols = param_shape.size() == 2 ? param_shape[1] : 1;
  const int64_t stored_cols = s.in_out ? s.source_rows : cols;  // a stored matrix's row length
  if (graph::IsBlockFormat(t.dtype) && stored_cols % graph::Info(t.dtype).block_elems != 0) {
    return absl::InvalidArgumentError(absl::StrCat(t.file, ": tensor '", t.name, "' has rows of ", stored_cols,
                                                   " values, which ", graph::Name(t.dtype), " cannot hold (blocks of ",
                                                   graph::Info(t.dtype).block_elems, ")"));
  }
  const size_t row_bytes = graph::ByteSize(t.dtype, stored_cols);
  const int64_t stored_rows = s.in_out ? cols : s.source_rows;
  const size_t matrix_bytes = row_bytes * static_cast<size_t>(stored_rows);
  const int64_t matrices = s.source_experts > 0 ? s.source_experts : 1;
  if (t.nbytes != matrix_bytes * static_cast<size_t>(matrices)) {
    return absl::InvalidArgumentError(absl::StrCat(t.file, ": tensor '", t.name, "' holds ", t.nbytes, " bytes, not the ",
                                                   matrix_bytes * static_cast<size_t>(matrices), " its shape needs in ",
                                                   graph::Name(t.dtype)));
  }
  const uint8_t* matrix = t.data + matrix_bytes * static_cast<size_t>(s.expert);
  if (!s.in_out) {
    std::vector<uint8_t> out;
    out.reserve(row_bytes * static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) {
      const uint8_t* row = matrix + row_bytes * static_cast<size_t>(s.row_offset + i * s.row_stride);
      out.insert(out.end(), row, row + row_bytes);
    }
    return std::pair{t.dtype, std::move(out)};
  }
  if (!graph::IsFloat(t.dtype)) {
    return absl::UnimplementedError(absl::StrCat(t.file, ": tensor '", t.name, "' of ", graph::Name(t.dtype),
                                                 " is stored [in, out]: only float tensors are read transposed"));
  }
  const std::vector<float> stored = quant::DecodeFloats(t.dtype, std::span<const uint8_t>(matrix, matrix_bytes));
  std::vector<float> values(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t column = s.row_offset + i * s.row_stride;
    for (int64_t c = 0; c < cols; ++c) {
      values[static_cast<size_t>(i * cols + c)] = stored[static_cast<size_t>(c * stored_cols + column)];
    }
  }
  return std::pair{DType::kF32, quant::EncodeFloats(DType::kF32, values)};
}

}  // namespace

absl::StatusOr<std::vector<uint8_t>> MaterializeParam(const formats::WeightStore& store, const graph::Node& param) {
  absl::StatusOr<formats::TensorView> t = ParamTensor(store, param);
  if (!t.ok()) return t.status();
  const std::string& name = t->name;
  const std::vector<int64_t> param_shape = graph::Resolve(param.type.shape, 0);
  const DType to = param.type.dtype;
  // Stored as it is (any format, block formats included), float -> float, float -> block
  // (quantizing at load, e.g. --quant) and block -> float (dequantizing); block -> another block
  // would quantize twice and is refused.
  const bool from_ok = graph::IsFloat(t->dtype) || graph::IsBlockFormat(t->dtype);
  const bool to_ok = graph::IsFloat(to) || graph::IsBlockFormat(to);
  if (t->dtype != to && (!from_ok || !to_ok || (graph::IsBlockFormat(t->dtype) && graph::IsBlockFormat(to)))) {
    return absl::UnimplementedError(absl::StrCat(t->file, ": tensor '", name, "': conversion from ",
                                                 graph::Name(t->dtype), " to ", graph::Name(to), " is not supported",
                                                 graph::IsBlockFormat(t->dtype) && graph::IsBlockFormat(to)
                                                     ? " (re-quantizing a quantized tensor)"
                                                     : ""));
  }
  // Rows of a block format hold whole blocks.
  const int64_t cols = param_shape.empty() ? 1 : param_shape.back();
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < param_shape.size(); ++i) rows *= param_shape[i];
  if (graph::IsBlockFormat(to) && cols % graph::Info(to).block_elems != 0) {
    return absl::InvalidArgumentError(absl::StrCat(t->file, ": tensor '", name, "' has rows of ", cols,
                                                   " values, which ", graph::Name(to), " cannot hold (blocks of ",
                                                   graph::Info(to).block_elems, ")"));
  }
  DType from = t->dtype;
  std::vector<uint8_t> bytes;
  if (const std::optional<graph::ParamSlice> slice = graph::ParamSliceOf(param)) {
    absl::StatusOr<std::pair<DType, std::vector<uint8_t>>> sliced = SliceBytes(*t, *slice, param_shape);
    if (!sliced.ok()) return sliced.status();
    from = sliced->first;
    bytes = std::move(sliced->second);
  } else {
    if (graph::IsBlockFormat(from) && cols % graph::Info(from).block_elems != 0) {
      return absl::InvalidArgumentError(absl::StrCat(t->file, ": tensor '", name, "' has rows of ", cols,
                                                     " values, which ", graph::Name(from), " cannot hold (blocks of ",
                                                     graph::Info(from).block_elems, ")"));
    }
    if (graph::IsBlockFormat(from) && t->nbytes != graph::ByteSize(from, cols) * static_cast<size_t>(rows)) {
      return absl::InvalidArgumentError(absl::StrCat(t->file, ": tensor '", name, "' holds ", t->nbytes,
                                                     " bytes, not the ", graph::ByteSize(from, cols) * static_cast<size_t>(rows),
                                                     " its shape needs in ", graph::Name(from)));
    }
    if (from == to) return std::vector<uint8_t>(t->data, t->data + t->nbytes);
    bytes.assign(t->data, t->data + t->nbytes);
  }
  if (from == to) return bytes;
  const std::vector<float> values = quant::DecodeFloats(from, bytes);
  if (graph::IsBlockFormat(to)) {
    absl::StatusOr<std::vector<uint8_t>> q = quant::QuantizeRows(to, values.data(), rows, cols);
    if (!q.ok()) {
      return absl::Status(q.status().code(), absl::StrCat(t->file, ": tensor '", name, "': ", q.status().message()));
    }
    return q;
  }
  return quant::EncodeFloats(to, values);
}

absl::StatusOr<std::vector<float>> StoreParamSource::Float32(const graph::Node& param) const {
  absl::StatusOr<std::vector<uint8_t>> bytes = MaterializeParam(store_, param);
  if (!bytes.ok()) return bytes.status();
  return quant::DecodeFloats(param.type.dtype, *bytes);
}

}  // namespace doppler::checkpoints
