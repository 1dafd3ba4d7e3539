#include "graph/dtype.h"

#include <array>

#include "absl/strings/ascii.h"

namespace doppler::graph {
namespace {
constexpr std::array<DTypeInfo, 17> kInfos = {{
    {"f32", 1, 4},
    {"f16", 1, 2},
    {"bf16", 1, 2},
    {"i32", 1, 4},
    {"q8_0", 32, 34},
    {"q4_k", 256, 144},
    {"q5_k", 256, 176},
    {"q6_k", 256, 210},
    {"q5_0", 32, 22},
    {"q4_0", 32, 18},
    {"q4_1", 32, 20},
    {"q5_1", 32, 24},
    {"q2_k", 256, 84},
    {"q3_k", 256, 110},
    {"iq4_nl", 32, 18},
    {"iq4_xs", 256, 136},
    {"mxfp4", 32, 17},
}};
}  // namespace

const DTypeInfo& Info(DType t) { return kInfos[static_cast<size_t>(t)]; }

std::optional<DType> ParseDType(std::string_view name) {
  std::string lower = absl::AsciiStrToLower(std::string(name));
  for (size_t i = 0; i < kInfos.size(); ++i) {
    if (lower == kInfos[i].name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

size_t ByteSize(DType t, int64_t n) {
  const DTypeInfo& info = Info(t);
  return static_cast<size_t>(n / info.block_elems) * static_cast<size_t>(info.block_bytes);
}

}  // namespace doppler::graph
