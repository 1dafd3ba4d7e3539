#include "models/weights.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/half.h"
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
  // A param with a "source" is rows [row_offset, row_offset + rows) of that checkpoint tensor,
  // which must be [source_rows, cols] (e.g. Phi-3's fused qkv_proj).
  const bool slice = param.attrs.Has("source");
  const std::string& name = slice ? param.attrs.Str("source") : param.attrs.Str("name");
  absl::StatusOr<TensorView> t = store.Get(name);
  if (!t.ok()) return t.status();
  std::vector<int64_t> want = graph::Resolve(param.type.shape, 0);
  const std::vector<int64_t> param_shape = want;
  if (slice) want[0] = param.attrs.Int("source_rows");
  if (t->shape != want) {
    std::string what = absl::StrCat("[", absl::StrJoin(want, ", "), "]");
    if (slice) {
      absl::StrAppend(&what, " (rows ", param.attrs.Int("row_offset"), "..",
                      param.attrs.Int("row_offset") + param_shape[0] - 1, " of it for ", param.attrs.Str("name"), ")");
    }
    return absl::InvalidArgumentError(absl::StrCat(t->file, ": tensor '", t->name, "' has shape [",
                                                   absl::StrJoin(t->shape, ", "), "] but the config implies ", what));
  }
  return t;
}

absl::StatusOr<std::vector<uint8_t>> MaterializeParam(const WeightStore& store, const graph::Node& param) {
  absl::StatusOr<TensorView> t = ParamTensor(store, param);
  if (!t.ok()) return t.status();
  const bool slice = param.attrs.Has("source");
  const std::string& name = t->name;
  const std::vector<int64_t> param_shape = graph::Resolve(param.type.shape, 0);
  const std::vector<int64_t>& want = t->shape;  // the checkpoint tensor's: the param's, or the whole fused one's
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
  const int64_t cols = want.empty() ? 1 : want.back();
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < want.size(); ++i) rows *= want[i];
  for (DType d : {t->dtype, to}) {
    if (graph::IsBlockFormat(d) && cols % graph::Info(d).block_elems != 0) {
      return absl::InvalidArgumentError(absl::StrCat(t->file, ": tensor '", name, "' has rows of ", cols,
                                                     " values, which ", graph::Name(d), " cannot hold (blocks of ",
                                                     graph::Info(d).block_elems, ")"));
    }
  }
  if (graph::IsBlockFormat(t->dtype) && t->nbytes != graph::ByteSize(t->dtype, cols) * static_cast<size_t>(rows)) {
    return absl::InvalidArgumentError(absl::StrCat(t->file, ": tensor '", name, "' holds ", t->nbytes, " bytes, not the ",
                                                   graph::ByteSize(t->dtype, cols) * static_cast<size_t>(rows),
                                                   " its shape needs in ", graph::Name(t->dtype)));
  }
  const uint8_t* data = t->data;
  size_t nbytes = t->nbytes;
  if (slice) {
    const int64_t offset = param.attrs.Int("row_offset"), slice_rows = param_shape[0];
    if (offset < 0 || offset + slice_rows > want[0]) {
      return absl::InvalidArgumentError(absl::StrCat(t->file, ": tensor '", name, "': rows ", offset, "..",
                                                     offset + slice_rows - 1, " are outside its ", want[0], " rows"));
    }
    const size_t row_bytes = graph::ByteSize(t->dtype, want[1]);
    if (nbytes != row_bytes * static_cast<size_t>(want[0])) {
      return absl::InvalidArgumentError(absl::StrCat(t->file, ": tensor '", name, "' holds ", nbytes,
                                                     " bytes, not the ", row_bytes * static_cast<size_t>(want[0]),
                                                     " its shape needs"));
    }
    data += row_bytes * static_cast<size_t>(offset);
    nbytes = row_bytes * static_cast<size_t>(slice_rows);
    rows = slice_rows;
  }
  if (t->dtype == to) return std::vector<uint8_t>(data, data + nbytes);
  const std::vector<float> values = DecodeFloats(t->dtype, std::span<const uint8_t>(data, nbytes));
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
