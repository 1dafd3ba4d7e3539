#include "models/weights.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/half.h"

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

absl::StatusOr<std::vector<uint8_t>> MaterializeParam(const WeightStore& store, const graph::Node& param) {
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
    return absl::InvalidArgumentError(absl::StrCat(t->file, ": tensor '", name, "' has shape [",
                                                   absl::StrJoin(t->shape, ", "), "] but the config implies ", what));
  }
  const DType to = param.type.dtype;
  if (!graph::IsFloat(t->dtype) || !graph::IsFloat(to)) {
    return absl::UnimplementedError(absl::StrCat(t->file, ": tensor '", name, "': conversion from ",
                                                 graph::Name(t->dtype), " to ", graph::Name(to), " is not supported"));
  }
  const uint8_t* data = t->data;
  size_t nbytes = t->nbytes;
  if (slice) {
    const int64_t offset = param.attrs.Int("row_offset"), rows = param_shape[0];
    if (offset < 0 || offset + rows > want[0]) {
      return absl::InvalidArgumentError(absl::StrCat(t->file, ": tensor '", name, "': rows ", offset, "..",
                                                     offset + rows - 1, " are outside its ", want[0], " rows"));
    }
    const size_t row_bytes = graph::ByteSize(t->dtype, want[1]);
    if (nbytes != row_bytes * static_cast<size_t>(want[0])) {
      return absl::InvalidArgumentError(absl::StrCat(t->file, ": tensor '", name, "' holds ", nbytes,
                                                     " bytes, not the ", row_bytes * static_cast<size_t>(want[0]),
                                                     " its shape needs"));
    }
    data += row_bytes * static_cast<size_t>(offset);
    nbytes = row_bytes * static_cast<size_t>(rows);
  }
  if (t->dtype == to) return std::vector<uint8_t>(data, data + nbytes);
  return EncodeFloats(to, DecodeFloats(t->dtype, std::span<const uint8_t>(data, nbytes)));
}

std::vector<uint8_t> EncodeFloats(DType dtype, std::span<const float> values) {
  const size_t size = static_cast<size_t>(graph::Info(dtype).block_bytes);
  std::vector<uint8_t> out(values.size() * size);
  for (size_t i = 0; i < values.size(); ++i) StoreFloat(dtype, values[i], &out[i * size]);
  return out;
}

std::vector<float> DecodeFloats(DType dtype, std::span<const uint8_t> bytes) {
  const size_t size = static_cast<size_t>(graph::Info(dtype).block_bytes);
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
  if (!graph::IsFloat(t.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(t.file, ": tensor '", t.name, "' has dtype ",
                                                   std::string(graph::Name(t.dtype)),
                                                   "; only f32, f16 and bf16 convert to float32"));
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
