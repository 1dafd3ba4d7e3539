// The IR: an SSA list of nodes in topological order, each producing one typed value.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/op.h"
#include "graph/paging.h"
#include "graph/shape.h"

namespace doppler::graph {

using ValueId = int32_t;

struct Node {
  ValueId id = -1;  // equals the node's index in Graph::nodes()
  OpKind kind = OpKind::kInput;
  std::vector<ValueId> inputs;
  Attrs attrs;
  TensorType type;
  std::string label;  // where the node comes from in the model, e.g. "layers.3.attn.q_proj"
};

class Graph {
 public:
  ValueId AddNode(OpKind kind, std::vector<ValueId> inputs, Attrs attrs, TensorType type, std::string label);

  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(ValueId id) const { return nodes_[static_cast<size_t>(id)]; }
  Node& mutable_node(ValueId id) { return nodes_[static_cast<size_t>(id)]; }
  int size() const { return static_cast<int>(nodes_.size()); }

  // Named results of a step (e.g. "logits", "next_token").
  void SetOutput(const std::string& name, ValueId id) { outputs_[name] = id; }
  const std::map<std::string, ValueId>& outputs() const { return outputs_; }
  std::optional<ValueId> output(std::string_view name) const;

  // Data of kConst nodes, by the node's name attribute.
  void SetConstData(const std::string& name, std::shared_ptr<const std::vector<float>> data) {
    consts_[name] = std::move(data);
  }
  const std::vector<float>* const_data(std::string_view name) const;

  // How the step's rows find their positions and cache rows (graph/paging.h); unpaged by default.
  const Paging& paging() const { return paging_; }
  void set_paging(const Paging& paging) { paging_ = paging; }

  // Nodes of a kind with a given name attribute (inputs, params, states are looked up by name).
  std::optional<ValueId> FindNamed(OpKind kind, std::string_view name) const;

  // Rewriting. A pass appends new nodes (inputs may be any existing node) and points the uses of
  // the nodes they replace at them (passes::UseLists, which finds the readers), or rewrites a node
  // in place from earlier nodes; then Sorted(keep) (passes::WithoutDeadNodes) makes it valid IR
  // again, once per pass. ReplaceOutputs points the outputs naming `from` at `to`.
  void ReplaceOutputs(ValueId from, ValueId to);
  // Nodes that read `id`.
  std::vector<ValueId> Users(ValueId id) const;
  // The nodes listed in `keep` (and nothing else), re-sorted topologically (preferring the
  // current order) and renumbered; outputs follow their nodes. Every input of a kept node must
  // be kept.
  Graph Sorted(const std::vector<bool>& keep) const;

 private:
  std::vector<Node> nodes_;
  std::map<std::string, ValueId> outputs_;
  Paging paging_;
  std::map<std::string, std::shared_ptr<const std::vector<float>>, std::less<>> consts_;
};

}  // namespace doppler::graph
