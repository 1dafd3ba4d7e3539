// fuse-gate-up: the gated MLP's two projections become one matmul on the stacked weight.
//
//   before:  g = matmul(x, w_gate)   u = matmul(x, w_up)   y = mul(act(g), u)     (act: silu, gelu_tanh)
//   after:   y = matmul(x, concat_rows(w_gate, w_up)) {epilogue = act_mul}
//
// Applies when g and u read the same x, their weights are of one dtype and row length (rows of a
// block format concatenate like any rows), neither matmul has an epilogue yet, and g, act(g) and
// u feed nothing else. A checkpoint that stores gate_up_proj (Phi-3) declares its gate and up as
// row slices of that tensor, so the stacked weight is the stored tensor again.
//
// The same holds for a mixture of experts' expert_matmul pair reading the same x and expert ids,
// whose stacked weights are each a concat_rows of one matrix per expert, or a stored stacked param
// (a GGUF's ffn_gate_exps / ffn_up_exps), read expert by expert as row slices of it: the fused
// weight stacks [gate_e | up_e] expert by expert, as the gated epilogue reads each expert's rows.
#include "absl/strings/str_cat.h"
#include "passes/registry.h"
#include "passes/rewrite.h"

namespace doppler::passes {
namespace {

// A matmul, or an expert_matmul without route weights, with no epilogue yet and a weight.
bool PlainProduct(const Graph& g, ValueId id) {
  const Node& n = g.node(id);
  const size_t inputs = n.kind == OpKind::kMatMul ? 2 : n.kind == OpKind::kExpertMatMul ? 3 : 0;
  return inputs > 0 && n.inputs.size() == inputs && !n.attrs.Has("epilogue") && !n.attrs.Has("split") &&
         IsWeight(g, n.inputs[1]);
}

// Whether the expert weight `w` is stacked per expert: a concat_rows of one matrix per expert, or
// a stacked param (whose experts are row slices of it).
bool StackedPerExpert(const Graph& g, ValueId w, size_t experts) {
  const Node& n = g.node(w);
  if (n.kind == OpKind::kConcatRows) return n.inputs.size() == experts;
  return n.kind == OpKind::kParam && n.type.shape.size() == 2 && n.type.shape[0].value % static_cast<int64_t>(experts) == 0;
}

// Each expert's matrix of a weight StackedPerExpert.
std::vector<ValueId> ExpertMatrices(Graph& g, UseLists& uses, ValueId w, size_t experts) {
  if (g.node(w).kind == OpKind::kConcatRows) return g.node(w).inputs;
  const int64_t rows = g.node(w).type.shape[0].value / static_cast<int64_t>(experts);
  std::vector<ValueId> matrices;
  for (size_t e = 0; e < experts; ++e) matrices.push_back(ParamRows(g, uses, w, static_cast<int64_t>(e) * rows, rows));
  return matrices;
}

// The stacked [gate | up] weight of two products: for expert products, each expert's gate and up
// matrices in turn (-1 where the weights are not stacked per expert).
absl::StatusOr<ValueId> GateUpWeight(Graph& g, UseLists& uses, const Node& gn, const Node& un) {
  const std::string label = absl::StrCat(gn.label, "+up");
  if (gn.kind == OpKind::kMatMul) return ConcatWeights(g, uses, {gn.inputs[1], un.inputs[1]}, label);
  const size_t experts = static_cast<size_t>(gn.attrs.Int("experts"));
  if (gn.inputs[2] != un.inputs[2] || gn.attrs.Int("experts") != un.attrs.Int("experts") ||
      !StackedPerExpert(g, gn.inputs[1], experts) || !StackedPerExpert(g, un.inputs[1], experts)) {
    return ValueId{-1};
  }
  const std::vector<ValueId> gates = ExpertMatrices(g, uses, gn.inputs[1], experts);
  const std::vector<ValueId> ups = ExpertMatrices(g, uses, un.inputs[1], experts);
  std::vector<ValueId> interleaved;
  for (size_t e = 0; e < experts; ++e) {
    interleaved.push_back(gates[e]);
    interleaved.push_back(ups[e]);
  }
  return ConcatWeights(g, uses, interleaved, label);
}

class FuseGateUp : public Pass {
 public:
  const char* name() const override { return "fuse-gate-up"; }

  absl::StatusOr<bool> Run(Graph& g) const override {
    bool changed = false;
    UseLists uses(g);
    const int original = g.size();
    for (ValueId id = 0; id < original; ++id) {
      const Node mul = g.node(id);
      if (mul.kind != OpKind::kMul) continue;
      for (int side = 0; side < 2; ++side) {
        const ValueId act = mul.inputs[static_cast<size_t>(side)], up = mul.inputs[static_cast<size_t>(1 - side)];
        const OpKind act_kind = g.node(act).kind;
        if (act_kind != OpKind::kSilu && act_kind != OpKind::kGeluTanh) continue;
        const ValueId gate = g.node(act).inputs[0];
        if (!PlainProduct(g, gate) || !PlainProduct(g, up) || gate == up) continue;
        const Node gn = g.node(gate);
        const Node un = g.node(up);
        if (gn.kind != un.kind || gn.inputs[0] != un.inputs[0] || uses.SoleUser(g, gate) != act ||
            uses.SoleUser(g, act) != id || uses.SoleUser(g, up) != id) {
          continue;
        }
        const graph::TensorType& wg = g.node(gn.inputs[1]).type;
        const graph::TensorType& wu = g.node(un.inputs[1]).type;
        if (wg != wu) continue;  // the gated product needs [gate | up] of equal rows and one dtype
        absl::StatusOr<ValueId> w = GateUpWeight(g, uses, gn, un);
        if (!w.ok()) return w.status();
        if (*w < 0) continue;
        std::vector<ValueId> inputs = gn.inputs;
        inputs[1] = *w;
        graph::Attrs attrs = gn.attrs;
        attrs.Set("epilogue", std::string(act_kind == OpKind::kSilu ? "silu_mul" : "gelu_tanh_mul"));
        absl::StatusOr<ValueId> fused = uses.AddNode(g, gn.kind, std::move(inputs), std::move(attrs), mul.label);
        if (!fused.ok()) return fused.status();
        NoteFused(g, *fused, {gate, up, act, id});
        uses.ReplaceAllUses(g, id, *fused);
        changed = true;
        break;
      }
    }
    if (changed) g = WithoutDeadNodes(g);
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeFuseGateUp() { return std::make_unique<FuseGateUp>(); }

}  // namespace doppler::passes
