#include "quant/float_codec.h"

#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/half.h"
#include "quant/quant.h"

namespace doppler::quant {
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

absl::StatusOr<std::vector<float>> ToFloat32(const formats::TensorView& t) {
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

}  // namespace doppler::quant
