// fuse-qkv: projections of one input become one matmul on the stacked weights, whose output is
// stored as one block per projection and read through parts.
//
//   before:  q = matmul(x, w_q) [+ b_q]   k = matmul(x, w_k) [+ b_k]   v = matmul(x, w_v) [+ b_v]
//   after:   f = matmul(x, concat_rows(w_q, w_k, w_v) [, concat_rows(b_q, b_k, b_v)])
//                 {split = "Nq,Nk,Nv" [, epilogue = bias]}
//            q = part(f, 0)   k = part(f, 1)   v = part(f, 2)
//
// Applies to every group of two or more plain matmuls reading the same x whose weights share a
// dtype and row length (quantized rows too; different types stay apart), when all of the group
// have a bias (a row-vector add they alone feed) or none has. Run it after fuse-gate-up, so the
// MLP's gate and up projections are already a gated matmul.
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/matmul_inputs.h"
#include "passes/registry.h"
#include "passes/rewrite.h"

namespace doppler::passes {
namespace {

struct Member {
  ValueId matmul;
  ValueId bias_add = -1;  // the add of a bias vector, when there is one
  ValueId bias = -1;
  ValueId result() const { return bias_add >= 0 ? bias_add : matmul; }
};

// The bias add right after a matmul: add(m, b) or add(b, m) with b a weight vector.
void FindBias(const Graph& g, const UseLists& uses, Member& m) {
  const ValueId user = uses.SoleUser(g, m.matmul);
  if (user < 0 || g.node(user).kind != OpKind::kAdd) return;
  for (ValueId in : g.node(user).inputs) {
    if (in != m.matmul && IsWeight(g, in) && g.node(in).type.shape.size() == 1) {
      m.bias_add = user;
      m.bias = in;
    }
  }
}

class FuseQkv : public Pass {
 public:
  const char* name() const override { return "fuse-qkv"; }

  absl::StatusOr<bool> Run(Graph& g) const override {
    // Group plain matmuls by (input, weight dtype, row length), in graph order.
    std::map<std::tuple<ValueId, graph::DType, int64_t>, std::vector<Member>> groups;
    UseLists uses(g);
    for (const Node& n : g.nodes()) {
      if (n.kind != OpKind::kMatMul) continue;
      const graph::MatMulInputs mm = graph::MatMulInputsOf(n);
      if (!graph::IsPlainProduct(mm) || !IsWeight(g, mm.w)) continue;
      const graph::TensorType& w = g.node(mm.w).type;
      Member m{n.id};
      FindBias(g, uses, m);
      groups[{mm.x, w.dtype, w.shape[1].value}].push_back(m);
    }
    bool changed = false;
    for (auto& [key, members] : groups) {
      if (members.size() < 2) continue;
      size_t with_bias = 0;
      for (const Member& m : members) with_bias += m.bias >= 0 ? 1 : 0;
      if (with_bias != 0 && with_bias != members.size()) continue;
      if (with_bias != 0 && g.node(members[0].bias).type.dtype != g.node(members[1].bias).type.dtype) continue;
      std::vector<ValueId> weights, biases, absorbed;
      std::vector<std::string> widths, labels;
      for (const Member& m : members) {
        weights.push_back(graph::MatMulInputsOf(g.node(m.matmul)).w);
        widths.push_back(absl::StrCat(g.node(m.matmul).type.shape[1].value));
        labels.push_back(g.node(m.matmul).label);
        absorbed.push_back(m.matmul);
        if (m.bias >= 0) {
          biases.push_back(m.bias);
          absorbed.push_back(m.bias_add);
        }
      }
      const std::string label = absl::StrJoin(labels, "+");
      absl::StatusOr<ValueId> w = ConcatWeights(g, uses, weights, label + ".weight");
      if (!w.ok()) return w.status();
      graph::MatMulInputs fused_inputs{.x = std::get<0>(key), .w = *w};
      graph::Attrs attrs{{"split", absl::StrJoin(widths, ",")}};
      if (!biases.empty()) {
        absl::StatusOr<ValueId> b = ConcatWeights(g, uses, biases, label + ".bias");
        if (!b.ok()) return b.status();
        fused_inputs.extras.push_back(*b);
        attrs.Set("epilogue", graph::EpilogueText({graph::EpilogueStep::kBias}));
      }
      absl::StatusOr<ValueId> fused =
          uses.AddNode(g, OpKind::kMatMul, graph::MatMulInputList(fused_inputs), attrs, label);
      if (!fused.ok()) return fused.status();
      NoteFused(g, *fused, absorbed);
      for (size_t i = 0; i < members.size(); ++i) {
        absl::StatusOr<ValueId> part = uses.AddNode(g, OpKind::kPart, {*fused}, graph::Attrs{{"index", int64_t(i)}},
                                               g.node(members[i].matmul).label);
        if (!part.ok()) return part.status();
        uses.ReplaceAllUses(g, members[i].result(), *part);
      }
      changed = true;
    }
    if (changed) g = WithoutDeadNodes(g);
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeFuseQkv() { return std::make_unique<FuseQkv>(); }

}  // namespace doppler::passes
