#include "graph/graph.h"

#include <algorithm>
#include <set>

namespace doppler::graph {

ValueId Graph::AddNode(OpKind kind, std::vector<ValueId> inputs, Attrs attrs, TensorType type, std::string label) {
  Node n;
  n.id = static_cast<ValueId>(nodes_.size());
  n.kind = kind;
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  n.type = std::move(type);
  n.label = std::move(label);
  nodes_.push_back(std::move(n));
  return nodes_.back().id;
}

std::optional<ValueId> Graph::output(std::string_view name) const {
  auto it = outputs_.find(std::string(name));
  if (it == outputs_.end()) return std::nullopt;
  return it->second;
}

const std::vector<float>* Graph::const_data(std::string_view name) const {
  auto it = consts_.find(name);
  return it == consts_.end() ? nullptr : it->second.get();
}

std::optional<ValueId> Graph::FindNamed(OpKind kind, std::string_view name) const {
  for (const Node& n : nodes_) {
    if (n.kind == kind && n.attrs.Str("name") == name) return n.id;
  }
  return std::nullopt;
}

void Graph::ReplaceOutputs(ValueId from, ValueId to) {
  for (auto& [name, id] : outputs_) {
    if (id == from) id = to;
  }
}

std::vector<ValueId> Graph::Users(ValueId id) const {
  std::vector<ValueId> users;
  for (const Node& n : nodes_) {
    if (std::find(n.inputs.begin(), n.inputs.end(), id) != n.inputs.end()) users.push_back(n.id);
  }
  return users;
}

Graph Graph::Sorted(const std::vector<bool>& keep) const {
  // Kahn's algorithm, always taking the ready node with the smallest current id.
  const size_t n = nodes_.size();
  std::vector<int> pending(n, 0);
  std::vector<std::vector<ValueId>> users(n);
  for (const Node& node : nodes_) {
    if (!keep[static_cast<size_t>(node.id)]) continue;
    for (ValueId in : node.inputs) {
      ++pending[static_cast<size_t>(node.id)];
      users[static_cast<size_t>(in)].push_back(node.id);
    }
  }
  std::set<ValueId> ready;
  for (const Node& node : nodes_) {
    if (keep[static_cast<size_t>(node.id)] && pending[static_cast<size_t>(node.id)] == 0) ready.insert(node.id);
  }
  Graph out;
  std::vector<ValueId> remap(n, -1);
  while (!ready.empty()) {
    const ValueId id = *ready.begin();
    ready.erase(ready.begin());
    Node copy = nodes_[static_cast<size_t>(id)];
    for (ValueId& in : copy.inputs) in = remap[static_cast<size_t>(in)];
    remap[static_cast<size_t>(id)] = out.AddNode(copy.kind, std::move(copy.inputs), std::move(copy.attrs),
                                                 std::move(copy.type), std::move(copy.label));
    for (ValueId u : users[static_cast<size_t>(id)]) {
      if (--pending[static_cast<size_t>(u)] == 0) ready.insert(u);
    }
  }
  for (const auto& [name, id] : outputs_) {
    if (remap[static_cast<size_t>(id)] >= 0) out.SetOutput(name, remap[static_cast<size_t>(id)]);
  }
  for (const auto& [name, data] : consts_) out.SetConstData(name, data);
  out.set_paging(paging_);
  return out;
}

}  // namespace doppler::graph
