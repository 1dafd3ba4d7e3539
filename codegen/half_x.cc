#include "codegen/half_x.h"

#include <vector>

#include "absl/status/statusor.h"
#include "codegen/tuning/matmul.h"
#include "graph/layout.h"
#include "graph/matmul_inputs.h"

namespace doppler::codegen {

bool HalfX(const graph::Graph& g, const graph::Node& v, const TargetCaps& caps, int64_t tokens,
           const InMatMulRules& rules) {
  using graph::OpKind;
  if (!rules.half_x || !caps.storage_16bit) return false;
  const bool producer = (v.kind == OpKind::kMatMul && graph::SplitWidths(v).empty()) || v.kind == OpKind::kAttention;
  if (!producer) return false;
  for (const auto& [name, id] : g.outputs()) {
    if (id == v.id) return false;
  }
  const std::vector<graph::ValueId> users = g.Users(v.id);
  if (users.empty()) return false;
  const int64_t rows = v.type.shape[0].Resolve(tokens);
  for (graph::ValueId id : users) {
    const graph::Node& u = g.node(id);
    if (u.kind != OpKind::kMatMul || u.attrs.Has("norm_eps") || u.attrs.Has("x_quant")) return false;
    for (size_t i = 0; i < u.inputs.size(); ++i) {
      if ((u.inputs[i] == v.id) != (i == 0)) return false;
    }
    const graph::Node& w = g.node(graph::MatMulInputsOf(u).w);
    if (w.type.shape[1].value % 4 != 0) return false;
    const int64_t n = u.type.shape[1].value;  // a gate's columns: a gated weight has twice as many rows
    absl::StatusOr<tuning::MatMulVariant> variant =
        tuning::ChooseMatMulVariant(caps, {.rows = rows,
                                           .n = n,
                                           .gates = w.type.shape[0].value / n,
                                           .w_dtype = w.type.dtype,
                                           .row_per_sequence = g.paging().row_per_sequence});
    if (!variant.ok() || *variant != tuning::MatMulVariant::kCoopRows) return false;
  }
  return true;
}

}  // namespace doppler::codegen
