// fuse-matmul-epilogue: elementwise work right after a matmul joins its epilogue chain, so the
// result is written once.
//
//   before:  m = matmul(x, w) {epilogue = E}   y = add(m, b)        (b a weight vector [N])
//   after:   y = matmul(x, w, ..., b) {epilogue = E,bias}
//   before:  y = silu(m) | gelu_tanh(m)
//   after:   y = matmul(x, w, ...) {epilogue = E,silu | E,gelu_tanh}
//   before:  y = add(m, r) | add(r, m)                             (r a [rows, N] value, a residual)
//   after:   y = matmul(x, w, ..., r) {epilogue = E,add}
//
// Applies when m feeds only that op, is not split, and (for add) r does not depend on m.
// The fused matmul takes y's place (y's readers need not change), so the graph stays sorted and
// one sweep in order fuses whole chains: add(silu(m + b), r) becomes one matmul when the sweep
// reaches each fused node in turn.
#include <optional>

#include "graph/epilogue.h"
#include "graph/matmul_inputs.h"
#include "graph/type_inference.h"
#include "passes/registry.h"
#include "passes/rewrite.h"

namespace doppler::passes {
namespace {

using graph::EpilogueStep;

class FuseMatmulEpilogue : public Pass {
 public:
  const char* name() const override { return "fuse-matmul-epilogue"; }

  absl::StatusOr<bool> Run(Graph& g) const override {
    bool changed = false;
    UseLists uses(g);
    for (ValueId id = 0; id < g.size(); ++id) {
      const Node m = g.node(id);  // a copy: m's slot is emptied below
      if (m.kind != OpKind::kMatMul) continue;
      graph::MatMulInputs mm = graph::MatMulInputsOf(m);
      if (mm.split) continue;
      const ValueId user = uses.SoleUser(g, id);
      if (user < 0) continue;
      const Node& u = g.node(user);
      std::optional<EpilogueStep> step;
      ValueId extra = -1;
      if (u.kind == OpKind::kSilu) step = EpilogueStep::kSilu;
      if (u.kind == OpKind::kGeluTanh) step = EpilogueStep::kGeluTanh;
      if (u.kind == OpKind::kAdd) {
        extra = u.inputs[0] == id ? u.inputs[1] : u.inputs[0];
        const bool vector = g.node(extra).type.shape.size() == 1;
        if (vector && !IsWeight(g, extra)) continue;
        if (!vector && DependsOn(g, extra, id)) continue;
        step = vector ? EpilogueStep::kBias : EpilogueStep::kAdd;
      }
      if (!step) continue;
      mm.epilogue.push_back(*step);
      if (extra >= 0) mm.extras.push_back(extra);
      graph::Attrs attrs = m.attrs;
      attrs.Set("epilogue", graph::EpilogueText(mm.epilogue));
      std::vector<ValueId> inputs = graph::MatMulInputList(mm);
      absl::StatusOr<graph::TensorType> type = graph::InferType(g, OpKind::kMatMul, inputs, attrs);
      if (!type.ok()) return type.status();
      NoteFused(g, id, {user});  // on m, whose attrs the fused node takes
      attrs.Set("fused", g.node(id).attrs.Str("fused"));
      Node& fused = g.mutable_node(user);
      fused.kind = OpKind::kMatMul;
      fused.attrs = std::move(attrs);
      fused.type = *std::move(type);
      fused.label = m.label;
      uses.SetInputs(g, user, std::move(inputs));
      uses.SetInputs(g, id, {});  // m is dead
      changed = true;
    }
    if (changed) g = WithoutDeadNodes(g);
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeFuseMatmulEpilogue() { return std::make_unique<FuseMatmulEpilogue>(); }

}  // namespace doppler::passes
