// Lowering: a plan's step graph → the dispatches it records, in order. Each dispatch is one
// kernel (its family, variant, the family's config, bindings, workgroups and GLSL), the node it is
// emitted for, and every node it computes: that node, and the nodes with no kernel of their own
// that it computes too (a tail a matmul's last workgroup finishes, a norm or last row a matmul
// computes as it reads its x: codegen/in_matmul.h, decided here). The scheduler records this list,
// and `doppler graph --lowered` prints it.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "codegen/kernel.h"
#include "graph/graph.h"

namespace doppler::codegen {

struct Dispatch {
  graph::ValueId node = -1;            // the node the kernel is emitted for
  std::vector<graph::ValueId> covers;  // the nodes it computes, `node` first
  Kernel kernel;
};

// Whether a node of this kind is computed on the device at all: not a source (input, param, const,
// state), a concat_rows (materialised at load) or a part (a view of its parent's value).
bool Computed(graph::OpKind kind);

// The dispatches of a plan of `g` for a bucket of `tokens` on `caps`. Every computed node is
// covered: by its own dispatches, else by the first dispatch that writes its value, else by every
// dispatch of a node that reads it (a last row in x); or lowering fails naming it.
absl::StatusOr<std::vector<Dispatch>> Lower(const graph::Graph& g, const TargetCaps& caps, int64_t tokens);

}  // namespace doppler::codegen
