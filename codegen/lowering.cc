#include "codegen/lowering.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/in_matmul.h"
#include "graph/attention_inputs.h"

namespace doppler::codegen {

bool Computed(graph::OpKind kind) {
  using graph::OpKind;
  return kind != OpKind::kInput && kind != OpKind::kParam && kind != OpKind::kConst && kind != OpKind::kState &&
         kind != OpKind::kConcatRows && kind != OpKind::kPart;
}

absl::StatusOr<std::vector<Dispatch>> Lower(const graph::Graph& g, const TargetCaps& caps, int64_t tokens) {
  absl::StatusOr<InMatMulRules> rules = InMatMulRulesFromTune();
  if (!rules.ok()) return rules.status();
  std::vector<Dispatch> out;
  std::vector<graph::ValueId> absorbed;  // computed nodes with no kernel of their own
  for (const graph::Node& n : g.nodes()) {
    if (!Computed(n.kind)) continue;
    if (InMatMul(g, n, tokens, *rules)) {
      absorbed.push_back(n.id);
      continue;
    }
    auto emit = [&](const graph::Node& e) -> absl::Status {
      absl::StatusOr<Kernel> k = EmitKernel(g, e, caps, tokens);
      if (!k.ok()) return k.status();
      out.push_back(Dispatch{n.id, {n.id}, *std::move(k)});
      return absl::OkStatus();
    };
    // An appending attention that does not append itself: its cache writes, then a plain attention.
    if (n.kind == graph::OpKind::kAttention && graph::AttentionInputsOf(n).k_new &&
        !AttentionAppendsItself(g, n, caps, tokens)) {
      for (const graph::Node& w : graph::AppendedCacheWrites(g, n)) {
        if (absl::Status s = emit(w); !s.ok()) return s;
      }
      if (absl::Status s = emit(graph::PlainAttention(n)); !s.ok()) return s;
    } else if (absl::Status s = emit(n); !s.ok()) {
      return s;
    }
  }
  // A node another kernel computes is covered by the first dispatch that writes its value (a tail,
  // a norm's value), else by the dispatches of the nodes that read it (a last_row whose reader
  // reads its input's row itself).
  for (graph::ValueId id : absorbed) {
    auto writes = [id](const Dispatch& d) {
      return std::any_of(d.kernel.args.begin(), d.kernel.args.end(),
                         [id](const KernelArg& a) { return a.value == id && a.written; });
    };
    bool covered = false;
    if (auto it = std::find_if(out.begin(), out.end(), writes); it != out.end()) {
      it->covers.push_back(id);
      covered = true;
    } else {
      for (Dispatch& d : out) {
        const std::vector<graph::ValueId>& in = g.node(d.node).inputs;
        if (std::find(in.begin(), in.end(), id) == in.end()) continue;
        d.covers.push_back(id);
        covered = true;
      }
    }
    if (!covered) {
      const graph::Node& n = g.node(id);
      return absl::InternalError(absl::StrCat("node %", id, " (", graph::OpName(n.kind), " '", n.label,
                                              "') has no kernel, and no dispatch computes it"));
    }
  }
  return out;
}

}  // namespace doppler::codegen
