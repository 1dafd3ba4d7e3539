#include "models/weights.h"

#include <cstring>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/half.h"
#include "graph/param_slice.h"
#include "models/quant/quant.h"

namespace doppler::models {
namespace {

using graph::DType;

float LoadFloat(DType dtype, const uint8_t* p) {
  switch (dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return graph::HalfToFloat(h);
    }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return graph::BF16ToFloat(h);
    }
    default:
      return 0.0f;
  }
}

void StoreFloat(DType dtype, float v, uint8_t* p) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(p, &v, 4);
      break;
    case DType::kF16: {
      uint16_t h = graph::FloatToHalf(v);
      std::memcpy(p, &h, 2);
      break;
    }
    case DType::kBF16: {
      uint16_t h = graph::FloatToBF16(v);
      std::memcpy(p, &h, 2);
      break;
    }
    default:
      break;
  }
}

}  // namespace

absl::StatusOr<TensorView> ParamTensor(const WeightStore& store, const graph::Node& param) {
  // A param with a "source" lies inside that checkpoint tensor (graph/param_slice.h), whose shape
  // the slice implies (e.g. Phi-3's fused qkv_proj, GPT-OSS's stacked experts).
  const std::optional<graph::ParamSlice> slice = graph::ParamSliceOf(param);
  const std::string& name = slice ? slice->source : param.attrs.Str("name");
  absl::StatusOr<TensorView> t = store.Get(name);
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
absl::StatusOr<std::pair<DType, std::vector<uint8_t>>> SliceBytes(const TensorView& t, const graph::ParamSlice& s,
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
  const std::vector<float> stored = DecodeFloats(t.dtype, std::span<const uint8_t>(matrix, matrix_bytes));
  std::vector<float> values(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t column = s.row_offset + i * s.row_stride;
    for (int64_t c = 0; c < cols; ++c) {
      values[static_cast<size_t>(i * cols + c)] = stored[static_cast<size_t>(c * stored_cols + column)];
    }
  }
  return std::pair{DType::kF32, EncodeFloats(DType::kF32, values)};
}

}  // namespace

absl::StatusOr<std::vector<uint8_t>> MaterializeParam(const WeightStore& store, const graph::Node& param) {
  absl::StatusOr<TensorView> t = ParamTensor(store, param);
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
  const std::vector<float> values = DecodeFloats(from, bytes);
  if (graph::IsBlockFormat(to)) {
    absl::StatusOr<std::vector<uint8_t>> q = QuantizeRows(to, values.data(), rows, cols);
    if (!q.ok()) {
      return absl::Status(q.status().code(), absl::StrCat(t->file, ": tensor '", name, "': ", q.status().message()));
    }
    return q;
  }
  return EncodeFloats(to, values);
}

std::vector<uint8_t> EncodeFloats(DType dtype, std::span<const float> values) {
  const size_t size = static_cast<size_t>(graph::Info(dtype).block_bytes);
  std::vector<uint8_t> out(values.size() * size);
  for (size_t i = 0; i < values.size(); ++i) StoreFloat(dtype, values[i], &out[i * size]);
  return out;
}

std::vector<float> DecodeFloats(DType dtype, std::span<const uint8_t> bytes) {
  const size_t size = static_cast<size_t>(graph::Info(dtype).block_bytes);
  if (graph::IsBlockFormat(dtype)) {
    const size_t elems = static_cast<size_t>(graph::Info(dtype).block_elems);
    std::vector<float> out(bytes.size() / size * elems);
    if (!DequantizeRow(dtype, bytes.data(), static_cast<int64_t>(out.size()), out.data()).ok()) return {};
    return out;
  }
  std::vector<float> out(bytes.size() / size);
  for (size_t i = 0; i < out.size(); ++i) out[i] = LoadFloat(dtype, &bytes[i * size]);
  return out;
}

absl::StatusOr<std::vector<float>> ToFloat32(const TensorView& t) {
  int64_t count = 1;
  for (int64_t d : t.shape) {
    if (d < 0 || (d != 0 && count > INT64_MAX / d)) {
      return absl::InvalidArgumentError(absl::StrCat(t.file, ": tensor '", t.name, "' has an invalid shape [",
                                                     absl::StrJoin(t.shape, ", "), "]"));
    }
    count *= d;
  }
  if (graph::IsBlockFormat(t.dtype)) {  // dequantized; blocks never straddle rows
    const int64_t cols = t.shape.empty() ? count : t.shape.back();
    const int64_t block = graph::Info(t.dtype).block_elems;
    if (cols % block != 0 || t.nbytes != graph::ByteSize(t.dtype, count)) {
      return absl::InvalidArgumentError(absl::StrCat(t.file, ": tensor '", t.name, "' of ",
                                                     std::string(graph::Name(t.dtype)), " holds ", t.nbytes,
                                                     " bytes, which do not make shape [", absl::StrJoin(t.shape, ", "),
                                                     "] (rows of whole blocks of ", block, ")"));
    }
    return DecodeFloats(t.dtype, std::span<const uint8_t>(t.data, t.nbytes));
  }
  if (!graph::IsFloat(t.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(t.file, ": tensor '", t.name, "' has dtype ",
                                                   std::string(graph::Name(t.dtype)),
                                                   "; only f32, f16, bf16 and the block formats convert to float32"));
  }
  const size_t elem = t.dtype == graph::DType::kF32 ? 4 : 2;
  if (t.nbytes / elem != static_cast<uint64_t>(count) || t.nbytes % elem != 0) {
    return absl::InvalidArgumentError(absl::StrCat(t.file, ": tensor '", t.name, "' holds ", t.nbytes,
                                                   " bytes but shape [", absl::StrJoin(t.shape, ", "),
                                                   "] of ", std::string(graph::Name(t.dtype)), " needs ",
                                                   static_cast<uint64_t>(count) * elem));
  }
  return DecodeFloats(t.dtype, std::span<const uint8_t>(t.data, t.nbytes));
}

absl::StatusOr<std::vector<float>> StoreParamSource::Float32(const graph::Node& param) const {
  absl::StatusOr<std::vector<uint8_t>> bytes = MaterializeParam(store_, param);
  if (!bytes.ok()) return bytes.status();
  return DecodeFloats(param.type.dtype, *bytes);
}

}  // namespace doppler::models
