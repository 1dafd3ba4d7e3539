#include "graph/verifier.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "graph/layout.h"
#include "graph/param_slice.h"
#include "graph/type_inference.h"

namespace doppler::graph {
namespace {

bool IsSource(OpKind k) {
  return k == OpKind::kInput || k == OpKind::kParam || k == OpKind::kConst || k == OpKind::kState;
}

absl::Status NodeError(const Node& n, const std::string& what) {
  return absl::FailedPreconditionError(absl::StrCat("node %", n.id, " (", OpName(n.kind), " '", n.label, "'): ", what));
}

absl::Status CheckAttrs(const Node& n) {
  for (const auto& [name, type] : GetOpDef(n.kind).attrs) {
    auto it = n.attrs.values().find(std::string(name));
    if (it == n.attrs.values().end()) return NodeError(n, absl::StrCat("missing attribute ", name));
    bool ok = (type == AttrType::kInt && std::holds_alternative<int64_t>(it->second)) ||
              (type == AttrType::kFloat && std::holds_alternative<double>(it->second)) ||
              (type == AttrType::kString && std::holds_alternative<std::string>(it->second));
    if (!ok) return NodeError(n, absl::StrCat("attribute ", name, " has the wrong type"));
  }
  return absl::OkStatus();
}

// A paged graph's caches are whole pages; the ops that keep one sequence's token history (GPU
// sampling) take no row per sequence.
absl::Status CheckPaging(const Graph& g) {
  const Paging& p = g.paging();
  if (!p.paged()) return absl::OkStatus();
  if (p.table_pages <= 0) return absl::FailedPreconditionError("a paged graph needs table_pages > 0");
  if (p.rows_share_sequences && !p.row_per_sequence) {
    return absl::FailedPreconditionError("rows share sequences only in a step with a row per sequence");
  }
  for (const Node& n : g.nodes()) {
    const bool cache = n.kind == OpKind::kCacheWrite || n.kind == OpKind::kAttention;
    if (cache && g.node(n.inputs[n.kind == OpKind::kAttention ? 1 : 0]).type.shape[0].value % p.page_rows != 0) {
      return NodeError(n, absl::StrCat("a paged cache must hold whole pages of ", p.page_rows, " rows"));
    }
    if (p.row_per_sequence &&
        (n.kind == OpKind::kRecordTokens || n.kind == OpKind::kRepeatPenalty || n.kind == OpKind::kSample)) {
      return NodeError(n, "keeps one sequence's tokens; a step with a row per sequence chooses by argmax");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Verify(const Graph& g) {
  std::set<std::pair<OpKind, std::string>> names;
  for (int i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.id != i) return NodeError(n, absl::StrCat("id does not match its position ", i));
    const OpDef& def = GetOpDef(n.kind);
    const int inputs = static_cast<int>(n.inputs.size());
    if (def.variadic ? inputs < def.num_inputs : inputs != def.num_inputs) {
      return NodeError(n, absl::StrCat("has ", inputs, " inputs, expected ", def.variadic ? "at least " : "",
                                       def.num_inputs));
    }
    for (ValueId in : n.inputs) {
      if (in < 0 || in >= i) return NodeError(n, absl::StrCat("input %", in, " is not defined before it"));
    }
    if (absl::Status s = CheckAttrs(n); !s.ok()) return s;
    if (IsSource(n.kind)) {
      if (!names.insert({n.kind, n.attrs.Str("name")}).second) {
        return NodeError(n, absl::StrCat("duplicate ", OpName(n.kind), " name '", n.attrs.Str("name"), "'"));
      }
      if (n.kind == OpKind::kParam && n.attrs.Has("source")) {  // part of a larger stored tensor
        if (absl::Status s = CheckParamSlice(n); !s.ok()) return NodeError(n, std::string(s.message()));
      }
      if (n.kind == OpKind::kConst) {
        const std::vector<float>* data = g.const_data(n.attrs.Str("name"));
        if (data == nullptr || static_cast<int64_t>(data->size()) != NumElements(n.type.shape, 0)) {
          return NodeError(n, "const data missing or of the wrong size");
        }
      }
      continue;
    }
    if (n.attrs.Has("split") && n.kind != OpKind::kMatMul && n.kind != OpKind::kRmsNorm) {
      return NodeError(n, "only matmul and rms_norm values can be split");
    }
    absl::StatusOr<TensorType> inferred = InferType(g, n.kind, n.inputs, n.attrs);
    if (!inferred.ok()) return NodeError(n, std::string(inferred.status().message()));
    if (*inferred != n.type) {
      return NodeError(n, absl::StrCat("type ", ToString(n.type), " differs from the inferred ", ToString(*inferred)));
    }
  }
  for (const auto& [name, id] : g.outputs()) {
    if (id < 0 || id >= g.size()) return absl::FailedPreconditionError(absl::StrCat("output ", name, " is dangling"));
    if (!SplitWidths(g.node(id)).empty()) {
      return absl::FailedPreconditionError(absl::StrCat("output ", name, " is a split value: output one of its parts"));
    }
  }
  if (absl::Status s = CheckPaging(g); !s.ok()) return s;
  // Split values are read through part nodes only; concat_rows reads weights only.
  for (const Node& n : g.nodes()) {
    for (ValueId in : n.inputs) {
      if (!SplitWidths(g.node(in)).empty() && n.kind != OpKind::kPart) {
        return NodeError(n, absl::StrCat("reads the split value %", in, " directly: read its parts"));
      }
      const OpKind k = g.node(in).kind;
      if (n.kind == OpKind::kConcatRows && k != OpKind::kParam && k != OpKind::kConst && k != OpKind::kConcatRows) {
        return NodeError(n, absl::StrCat("input %", in, " is not a weight (a param, const or concat_rows)"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace doppler::graph
