#include "graph/layout.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "graph/matmul_inputs.h"
#include "graph/rms_norm_inputs.h"

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

std::vector<ValueId> MatmulsOfNormedPart(const Graph& g, ValueId norm) {
  const Node& n = g.node(norm);
  if (n.kind != OpKind::kRmsNorm || !RmsNormInputsOf(n).residual || SplitWidths(n).size() != 2) return {};
  std::vector<ValueId> matmuls;
  for (ValueId p : g.Users(norm)) {
    const Node& part = g.node(p);
    if (part.kind != OpKind::kPart) return {};
    if (part.attrs.Int("index") != 1) continue;
    for (const auto& [name, out] : g.outputs()) {
      if (out == p) return {};  // read after the step
    }
    for (ValueId u : g.Users(p)) {
      const Node& m = g.node(u);
      if (m.kind != OpKind::kMatMul) return {};
      const MatMulInputs mm = MatMulInputsOf(m);
      if (mm.x != p || std::count(m.inputs.begin(), m.inputs.end(), p) != 1 || mm.x_norm) return {};
      matmuls.push_back(u);
    }
  }
  std::sort(matmuls.begin(), matmuls.end());
  return matmuls;
}

std::optional<ValueId> SoleMatmulOfLastRow(const Graph& g, ValueId last_row) {
  if (g.node(last_row).kind != OpKind::kLastRow) return std::nullopt;
  for (const auto& [name, out] : g.outputs()) {
    if (out == last_row) return std::nullopt;
  }
  const std::vector<ValueId> users = g.Users(last_row);
  if (users.size() != 1) return std::nullopt;
  const Node& m = g.node(users[0]);
  if (m.kind != OpKind::kMatMul || MatMulInputsOf(m).x != last_row ||
      std::count(m.inputs.begin(), m.inputs.end(), last_row) != 1) {
    return std::nullopt;
  }
  return users[0];
}

}  // namespace doppler::graph
