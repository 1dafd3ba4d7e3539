#include "graph/layout.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace doppler::graph {

std::vector<int64_t> SplitWidths(const Node& n) {
  std::vector<int64_t> widths;
  if (!n.attrs.Has("split")) return widths;
  for (absl::string_view part : absl::StrSplit(n.attrs.Str("split"), ',', absl::SkipEmpty())) {
    int64_t w = 0;
    widths.push_back(absl::SimpleAtoi(part, &w) ? w : -1);
  }
  return widths;
}

std::vector<PartRange> SplitLayout(const std::vector<int64_t>& widths, int64_t rows, DType dtype) {
  std::vector<PartRange> ranges;
  size_t offset = 0;
  for (int64_t w : widths) {
    offset = (offset + kPartAlignment - 1) / kPartAlignment * kPartAlignment;
    const size_t bytes = ByteSize(dtype, rows * w);
    ranges.push_back({offset, bytes});
    offset += bytes;
  }
  return ranges;
}

size_t ValueBytes(const Node& n, int64_t tokens) {
  const std::vector<int64_t> widths = SplitWidths(n);
  if (widths.empty()) return ByteSize(n.type.dtype, NumElements(n.type.shape, tokens));
  const std::vector<PartRange> ranges = SplitLayout(widths, n.type.shape[0].Resolve(tokens), n.type.dtype);
  return ranges.back().offset + ranges.back().bytes;
}

}  // namespace doppler::graph
