// Helpers the passes share for matching and rewriting graphs.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace doppler::passes {

using graph::Graph;
using graph::Node;
using graph::OpKind;
using graph::ValueId;

class UseLists;

// A value known at load time: a param, a const, or a concat_rows of those.
bool IsWeight(const Graph& g, ValueId id);
bool IsOutput(const Graph& g, ValueId id);
// Whether `to` depends on `from` (directly or through other nodes). `g` must be in topological
// order (as every graph is between passes, and one a pass rewrites in place from earlier nodes): only
// nodes after `from` are visited.
bool DependsOn(const Graph& g, ValueId to, ValueId from);

// Records on a fused node what it absorbed, for `doppler graph` (attr "fused").
void NoteFused(Graph& g, ValueId fused, const std::vector<ValueId>& absorbed);

// Appends `old`'s op again with new inputs and attrs (its label kept), records that it absorbed
// `absorbed`, and points `old`'s readers at it (through `uses`, which it keeps current).
absl::Status RebuildAs(Graph& g, UseLists& uses, ValueId old, std::vector<ValueId> inputs, graph::Attrs attrs,
                       const std::vector<ValueId>& absorbed);

// Attrs of a norm prologue taken from the rms_norm `norm`: norm_eps and norm_offset.
void SetNormPrologue(graph::Attrs& attrs, const Node& norm);

// Drops every node no output depends on and re-sorts the rest.
Graph WithoutDeadNodes(const Graph& g);

// The concat_rows of `weights` (or the weight itself when there is one), named after them.
// Appended through `uses`, which it keeps current.
absl::StatusOr<ValueId> ConcatWeights(Graph& g, UseLists& uses, const std::vector<ValueId>& weights,
                                      const std::string& label);

// Rows [row_offset, row_offset + rows) of the 2-D param `param` as a param of its own, which reads
// them from the stored tensor `param` reads (its own, or the one it is a slice of). Appended
// through `uses`.
ValueId ParamRows(Graph& g, UseLists& uses, ValueId param, int64_t row_offset, int64_t rows);

// Who reads each value (each reader once, however many of its inputs it is, in increasing id), for
// a pass that rewrites the graph: one scan of the graph, then kept current by the rewrites below,
// so that asking or redirecting costs the value's readers, not the graph's size. A pass makes
// every change to inputs through these while it holds the lists.
class UseLists {
 public:
  explicit UseLists(const Graph& g);
  const std::vector<ValueId>& users(ValueId id) const { return users_[static_cast<size_t>(id)]; }
  // The only reader of `id` (and `id` is no graph output, and reads it once), or -1.
  ValueId SoleUser(const Graph& g, ValueId id) const;
  // Sets node `id`'s inputs and updates the lists.
  void SetInputs(Graph& g, ValueId id, std::vector<ValueId> inputs);
  // Appends a node typed by type inference (the caller re-sorts the graph once at the end).
  absl::StatusOr<ValueId> AddNode(Graph& g, OpKind kind, std::vector<ValueId> inputs, graph::Attrs attrs,
                                  std::string label);
  // Appends a source node (a param, const, ...), which carries its own type.
  ValueId AddSource(Graph& g, OpKind kind, graph::Attrs attrs, graph::TensorType type, std::string label);
  // Points every reader of `from` but `to` itself (the replacement may read what it replaces), and
  // every output naming `from`, at `to`.
  void ReplaceAllUses(Graph& g, ValueId from, ValueId to);

 private:
  void AddUser(ValueId value, ValueId reader);
  void RemoveUser(ValueId value, ValueId reader);

  std::vector<std::vector<ValueId>> users_;
};

}  // namespace doppler::passes
