#include "graph/graph.h"

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

}  // namespace doppler::graph
