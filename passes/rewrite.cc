#include "passes/rewrite.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/type_inference.h"

namespace doppler::passes {

bool IsWeight(const Graph& g, ValueId id) {
  const OpKind k = g.node(id).kind;
  return k == OpKind::kParam || k == OpKind::kConst || k == OpKind::kConcatRows;
}

bool IsOutput(const Graph& g, ValueId id) {
  for (const auto& [name, out] : g.outputs()) {
    if (out == id) return true;
  }
  return false;
}

bool DependsOn(const Graph& g, ValueId to, ValueId from) {
  std::vector<ValueId> stack = {to};
  std::vector<bool> seen(static_cast<size_t>(g.size()), false);
  while (!stack.empty()) {
    const ValueId id = stack.back();
    stack.pop_back();
    if (id == from) return true;
    if (id < from || seen[static_cast<size_t>(id)]) continue;
    seen[static_cast<size_t>(id)] = true;
    for (ValueId in : g.node(id).inputs) stack.push_back(in);
  }
  return false;
}

void NoteFused(Graph& g, ValueId fused, const std::vector<ValueId>& absorbed) {
  std::vector<std::string> parts;
  if (g.node(fused).attrs.Has("fused")) parts.push_back(g.node(fused).attrs.Str("fused"));
  for (ValueId id : absorbed) {
    const Node& n = g.node(id);
    if (n.attrs.Has("fused")) parts.push_back(n.attrs.Str("fused"));
    parts.push_back(absl::StrCat(graph::OpName(n.kind), ":", n.label));
  }
  g.mutable_node(fused).attrs.Set("fused", absl::StrJoin(parts, " "));
}

absl::Status RebuildAs(Graph& g, UseLists& uses, ValueId old, std::vector<ValueId> inputs, graph::Attrs attrs,
                       const std::vector<ValueId>& absorbed) {
  const Node n = g.node(old);  // a copy: adding a node moves the graph's nodes
  absl::StatusOr<ValueId> rebuilt = uses.AddNode(g, n.kind, std::move(inputs), std::move(attrs), n.label);
  if (!rebuilt.ok()) return rebuilt.status();
  NoteFused(g, *rebuilt, absorbed);
  uses.ReplaceAllUses(g, old, *rebuilt);
  return absl::OkStatus();
}

void SetNormPrologue(graph::Attrs& attrs, const Node& norm) {
  attrs.Set("norm_eps", norm.attrs.Float("eps"));
  attrs.Set("norm_offset", norm.attrs.Float("weight_offset"));
}

Graph WithoutDeadNodes(const Graph& g) {
  std::vector<bool> live(static_cast<size_t>(g.size()), false);
  std::vector<ValueId> stack;
  for (const auto& [name, id] : g.outputs()) stack.push_back(id);
  while (!stack.empty()) {
    const ValueId id = stack.back();
    stack.pop_back();
    if (live[static_cast<size_t>(id)]) continue;
    live[static_cast<size_t>(id)] = true;
    for (ValueId in : g.node(id).inputs) stack.push_back(in);
  }
  return g.Sorted(live);
}

absl::StatusOr<ValueId> ConcatWeights(Graph& g, UseLists& uses, const std::vector<ValueId>& weights,
                                      const std::string& label) {
  if (weights.size() == 1) return weights[0];
  std::vector<std::string> names;
  for (ValueId w : weights) names.push_back(g.node(w).attrs.Str("name"));
  return uses.AddNode(g, OpKind::kConcatRows, weights, graph::Attrs{{"name", absl::StrCat("concat(", absl::StrJoin(names, "+"), ")")}},
                 label);
}

ValueId ParamRows(Graph& g, UseLists& uses, ValueId param, int64_t row_offset, int64_t rows) {
  const Node p = g.node(param);  // a copy: adding a node moves the graph's nodes
  const bool slice = p.attrs.Has("source");
  const std::string& source = slice ? p.attrs.Str("source") : p.attrs.Str("name");
  const int64_t source_rows = slice ? p.attrs.Int("source_rows") : p.type.shape[0].value;
  const int64_t offset = (slice ? p.attrs.Int("row_offset") : 0) + row_offset;
  graph::TensorType type = p.type;
  type.shape[0] = graph::Dim::Static(rows);
  const std::string name = absl::StrCat(source, "[", offset, ":", offset + rows, "]");
  return uses.AddSource(g, OpKind::kParam,
                        graph::Attrs{{"name", name}, {"source", source}, {"source_rows", source_rows}, {"row_offset", offset}},
                        std::move(type), name);
}

UseLists::UseLists(const Graph& g) : users_(static_cast<size_t>(g.size())) {
  for (const Node& n : g.nodes()) {
    for (ValueId in : n.inputs) AddUser(in, n.id);
  }
}

void UseLists::AddUser(ValueId value, ValueId reader) {
  std::vector<ValueId>& u = users_[static_cast<size_t>(value)];
  if (u.empty() || u.back() < reader) {
    u.push_back(reader);  // the common case: readers arrive in id order
    return;
  }
  auto it = std::lower_bound(u.begin(), u.end(), reader);
  if (*it != reader) u.insert(it, reader);
}

void UseLists::RemoveUser(ValueId value, ValueId reader) {
  std::vector<ValueId>& u = users_[static_cast<size_t>(value)];
  auto it = std::lower_bound(u.begin(), u.end(), reader);
  if (it != u.end() && *it == reader) u.erase(it);
}

ValueId UseLists::SoleUser(const Graph& g, ValueId id) const {
  const std::vector<ValueId>& u = users(id);
  if (u.size() != 1 || IsOutput(g, id)) return -1;
  const Node& reader = g.node(u[0]);
  return std::count(reader.inputs.begin(), reader.inputs.end(), id) == 1 ? u[0] : -1;
}

void UseLists::SetInputs(Graph& g, ValueId id, std::vector<ValueId> inputs) {
  for (ValueId in : g.node(id).inputs) RemoveUser(in, id);
  for (ValueId in : inputs) AddUser(in, id);
  g.mutable_node(id).inputs = std::move(inputs);
}

absl::StatusOr<ValueId> UseLists::AddNode(Graph& g, OpKind kind, std::vector<ValueId> inputs, graph::Attrs attrs,
                                          std::string label) {
  absl::StatusOr<graph::TensorType> type = graph::InferType(g, kind, inputs, attrs);
  if (!type.ok()) return type.status();
  const ValueId id = g.AddNode(kind, std::move(inputs), std::move(attrs), *std::move(type), std::move(label));
  users_.emplace_back();
  for (ValueId in : g.node(id).inputs) AddUser(in, id);
  return id;
}

ValueId UseLists::AddSource(Graph& g, OpKind kind, graph::Attrs attrs, graph::TensorType type, std::string label) {
  const ValueId id = g.AddNode(kind, {}, std::move(attrs), std::move(type), std::move(label));
  users_.emplace_back();
  return id;
}

void UseLists::ReplaceAllUses(Graph& g, ValueId from, ValueId to) {
  const std::vector<ValueId> readers = users(from);  // a copy: the loop edits the list
  for (ValueId r : readers) {
    if (r == to) continue;
    for (ValueId& in : g.mutable_node(r).inputs) {
      if (in == from) in = to;
    }
    RemoveUser(from, r);
    AddUser(to, r);
  }
  g.ReplaceOutputs(from, to);
}

}  // namespace doppler::passes
