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
// GPT-OSS's pair
// fuses so too:
//
//   before:  g = expert_matmul(x, wg, ids[, bg]) {bias}   u = expert_matmul(x, wu, ids[, bu]) {bias}
//            y = clamped_swiglu(g, u) {alpha, limit}
//   after:   y = expert_matmul(x, stack(wg_e, wu_e), ids[, stack(bg_e, bu_e)]) {bias, clamped_swiglu}
//
// where both products have a bias (each a concat_rows of one vector per expert) or neither.
#include "absl/strings/str_cat.h"
#include "graph/matmul_inputs.h"
#include "passes/registry.h"
#include "passes/rewrite.h"

namespace doppler::passes {
namespace {

using graph::EpilogueStep;

// A matmul, or an expert_matmul without route weights, with no epilogue yet (or, with `biased`, an
// expert_matmul whose epilogue is one bias step) and a weight.
bool PlainProduct(const Graph& g, ValueId id, bool biased = false) {
  const Node& n = g.node(id);
  if (n.kind != OpKind::kMatMul && n.kind != OpKind::kExpertMatMul) return false;
  graph::MatMulInputs m = graph::MatMulInputsOf(n);
  if (biased) {
    if (n.kind != OpKind::kExpertMatMul || m.epilogue != std::vector{EpilogueStep::kBias} || m.extras.size() != 1 ||
        !IsWeight(g, m.extras[0])) {
      return false;
    }
    m.epilogue.clear();
    m.extras.clear();
  }
  return graph::IsPlainProduct(m) && IsWeight(g, m.w);
}

// Whether the expert weight (or bias) `w` is stacked per expert: a concat_rows of one per expert,
// or a stacked param matrix (whose experts are row slices of it).
bool StackedPerExpert(const Graph& g, ValueId w, size_t experts) {
  const Node& n = g.node(w);
  if (n.kind == OpKind::kConcatRows) return n.inputs.size() == experts;
  return n.kind == OpKind::kParam && n.type.shape.size() == 2 && n.type.shape[0].value % static_cast<int64_t>(experts) == 0;
}

// Each expert's part of a weight StackedPerExpert.
std::vector<ValueId> ExpertMatrices(Graph& g, UseLists& uses, ValueId w, size_t experts) {
  if (g.node(w).kind == OpKind::kConcatRows) return g.node(w).inputs;
  const int64_t rows = g.node(w).type.shape[0].value / static_cast<int64_t>(experts);
  std::vector<ValueId> matrices;
  for (size_t e = 0; e < experts; ++e) matrices.push_back(ParamRows(g, uses, w, static_cast<int64_t>(e) * rows, rows));
  return matrices;
}

// The stack of two expert products' weights (or biases) `wg` and `wu`, each expert's gate then up
// in turn (-1 where they are not stacked per expert).
absl::StatusOr<ValueId> InterleavedExperts(Graph& g, UseLists& uses, ValueId wg, ValueId wu, size_t experts,
                                           const std::string& label) {
  if (!StackedPerExpert(g, wg, experts) || !StackedPerExpert(g, wu, experts)) return ValueId{-1};
  const std::vector<ValueId> gates = ExpertMatrices(g, uses, wg, experts);
  const std::vector<ValueId> ups = ExpertMatrices(g, uses, wu, experts);
  std::vector<ValueId> interleaved;
  for (size_t e = 0; e < experts; ++e) {
    interleaved.push_back(gates[e]);
    interleaved.push_back(ups[e]);
  }
  return ConcatWeights(g, uses, interleaved, label);
}

// The stacked [gate | up] weight of two products: for expert products, each expert's gate and up
// matrices in turn (-1 where the weights are not stacked per expert).
absl::StatusOr<ValueId> GateUpWeight(Graph& g, UseLists& uses, const Node& gn, const Node& un) {
  const std::string label = absl::StrCat(gn.label, "+up");
  const graph::MatMulInputs gm = graph::MatMulInputsOf(gn), um = graph::MatMulInputsOf(un);
  if (gn.kind == OpKind::kMatMul) return ConcatWeights(g, uses, {gm.w, um.w}, label);
  if (gm.ids != um.ids || gm.experts != um.experts) return ValueId{-1};
  return InterleavedExperts(g, uses, gm.w, um.w, static_cast<size_t>(gm.experts), label);
}

// clamped_swiglu(g, u) of two expert products as one gated product; false where it does not apply.
absl::StatusOr<bool> FuseClampedSwiglu(Graph& g, UseLists& uses, const Node& act) {
  const ValueId gate = act.inputs[0], up = act.inputs[1];
  const bool biased = graph::MatMulInputsOf(g.node(gate)).epilogue == std::vector{EpilogueStep::kBias};
  if (gate == up || !PlainProduct(g, gate, biased) || !PlainProduct(g, up, biased)) return false;
  const Node gn = g.node(gate);
  const Node un = g.node(up);
  const graph::MatMulInputs gm = graph::MatMulInputsOf(gn), um = graph::MatMulInputsOf(un);
  if (gn.kind != OpKind::kExpertMatMul || un.kind != OpKind::kExpertMatMul || gm.x != um.x ||
      uses.SoleUser(g, gate) != act.id || uses.SoleUser(g, up) != act.id || g.node(gm.w).type != g.node(um.w).type) {
    return false;
  }
  absl::StatusOr<ValueId> w = GateUpWeight(g, uses, gn, un);
  if (!w.ok()) return w.status();
  if (*w < 0) return false;
  graph::MatMulInputs fused{.x = gm.x, .w = *w, .ids = gm.ids};
  graph::Attrs attrs = gn.attrs;
  std::vector<EpilogueStep> epilogue = gm.epilogue;
  epilogue.push_back(EpilogueStep::kClampedSwiglu);
  attrs.Set("epilogue", graph::EpilogueText(epilogue));
  attrs.Set("alpha", act.attrs.Float("alpha"));
  attrs.Set("limit", act.attrs.Float("limit"));
  if (biased) {
    absl::StatusOr<ValueId> b = InterleavedExperts(g, uses, gm.extras[0], um.extras[0], static_cast<size_t>(gm.experts),
                                                   absl::StrCat(gn.label, "+up.bias"));
    if (!b.ok()) return b.status();
    if (*b < 0) return false;
    fused.extras.push_back(*b);
  }
  absl::StatusOr<ValueId> result =
      uses.AddNode(g, OpKind::kExpertMatMul, graph::MatMulInputList(fused), std::move(attrs), act.label);
  if (!result.ok()) return result.status();
  NoteFused(g, *result, {gate, up, act.id});
  uses.ReplaceAllUses(g, act.id, *result);
  return true;
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
      if (mul.kind == OpKind::kClampedSwiglu) {
        absl::StatusOr<bool> fused = FuseClampedSwiglu(g, uses, mul);
        if (!fused.ok()) return fused.status();
        changed = changed || *fused;
        continue;
      }
      if (mul.kind != OpKind::kMul) continue;
      for (int side = 0; side < 2; ++side) {
        const ValueId act = mul.inputs[static_cast<size_t>(side)], up = mul.inputs[static_cast<size_t>(1 - side)];
        const OpKind act_kind = g.node(act).kind;
        if (act_kind != OpKind::kSilu && act_kind != OpKind::kGeluTanh) continue;
        const ValueId gate = g.node(act).inputs[0];
        if (!PlainProduct(g, gate) || !PlainProduct(g, up) || gate == up) continue;
        const Node gn = g.node(gate);
        const Node un = g.node(up);
        graph::MatMulInputs fused = graph::MatMulInputsOf(gn);
        const graph::MatMulInputs um = graph::MatMulInputsOf(un);
        if (gn.kind != un.kind || fused.x != um.x || uses.SoleUser(g, gate) != act ||
            uses.SoleUser(g, act) != id || uses.SoleUser(g, up) != id) {
          continue;
        }
        const graph::TensorType& wg = g.node(fused.w).type;
        const graph::TensorType& wu = g.node(um.w).type;
        if (wg != wu) continue;  // the gated product needs [gate | up] of equal rows and one dtype
        absl::StatusOr<ValueId> w = GateUpWeight(g, uses, gn, un);
        if (!w.ok()) return w.status();
        if (*w < 0) continue;
        fused.w = *w;
        const std::vector<ValueId> inputs = graph::MatMulInputList(fused);
        graph::Attrs attrs = gn.attrs;
        attrs.Set("epilogue", graph::EpilogueText({act_kind == OpKind::kSilu ? EpilogueStep::kSiluMul
                                                                             : EpilogueStep::kGeluTanhMul}));
        absl::StatusOr<ValueId> result = uses.AddNode(g, gn.kind, inputs, std::move(attrs), mul.label);
        if (!result.ok()) return result.status();
        NoteFused(g, *result, {gate, up, act, id});
        uses.ReplaceAllUses(g, id, *result);
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
