#include "codegen/plane_x.h"

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/weight_parts.h"

namespace doppler::codegen {
namespace {

// The planes an expert product reading `v` as x would take (none where it reads x otherwise).
PlaneX ReaderPlanes(const graph::Graph& g, const graph::Node& u, const graph::Node& v, int64_t tokens,
                    const InMatMulRules& rules) {
  if (u.kind != graph::OpKind::kExpertMatMul || u.attrs.Has("x_quant") || ExpertsGrouped(u, tokens, rules)) return {};
  for (size_t i = 0; i < u.inputs.size(); ++i) {
    if ((u.inputs[i] == v.id) != (i == 0)) return {};
  }
  const graph::Node& w = g.node(u.inputs[1]);
  const int64_t kdim = w.type.shape[1].value;
  // The planes follow the parts' values, not how the kernel multiplies them.
  absl::StatusOr<WeightParts> parts = ExpertGemvParts(w.type.dtype, kdim, /*q8=*/false, /*half_dots=*/false);
  if (!parts.ok() || !parts->contiguous || parts->values % 4 != 0 || kdim % parts->values != 0) return {};
  return {kdim, parts->values};
}

}  // namespace

PlaneX PlaneXOf(const graph::Graph& g, const graph::Node& v, int64_t tokens, const InMatMulRules& rules) {
  using graph::OpKind;
  if (!rules.planes_x) return {};
  const std::vector<graph::ValueId> users = g.Users(v.id);
  if (users.empty()) return {};
  for (const auto& [name, id] : g.outputs()) {
    if (id == v.id) return {};
  }
  // The producer's store, and the readers that load the value (the norm's writer computes it).
  size_t first_reader = 0;
  if (v.kind == OpKind::kRmsNorm && PlainNormInFloatReader(g, v, tokens, rules)) {
    first_reader = 1;
  } else if (v.kind != OpKind::kExpertMatMul || ExpertsGrouped(v, tokens, rules)) {
    return {};
  }
  if (users.size() <= first_reader) return {};
  PlaneX planes;
  for (size_t i = first_reader; i < users.size(); ++i) {
    const graph::Node& u = g.node(users[i]);
    const PlaneX reader = ReaderPlanes(g, u, v, tokens, rules);
    if (!reader.planes() || v.type.shape[1].value % reader.k != 0) return {};
    if (planes.planes() && (planes.k != reader.k || planes.part_values != reader.part_values)) return {};
    planes = reader;
  }
  return planes;
}

std::string PlaneIndexGlsl(const std::string& name, const PlaneX& planes) {
  return absl::StrCat("uint ", name, "(uint i) {\n  uint k = i % ", planes.k, "u;\n  return i - k + ((k % ",
                      planes.part_values, "u) / 4u * ", planes.k / planes.part_values, "u + k / ",
                      planes.part_values, "u) * 4u + k % 4u;\n}\n");
}

}  // namespace doppler::codegen
