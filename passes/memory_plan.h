// The memory planner: every activation of a step gets a range of one arena, and values whose
// lifetimes do not overlap share bytes.
//
// Lifetimes follow the step's dispatches, as lowering made them (codegen/lowering.h): a value is
// live from the first dispatch that binds it to the last, and a graph output to the end of the
// step. What a kernel computes beside its own node (a matmul's tail, a norm it restates as it
// reads x) it binds, so its lifetime is that kernel's; a value no dispatch binds gets no bytes. Aliases own no bytes: a part is a range of its split parent (graph/layout.h) and the
// output of an op that updates its first input in place (GetOpDef(kind).updates_input0) is that
// input's buffer; an alias keeps its base alive until its own last use. Values that live outside
// the arena (sources, concat_rows, and whatever the caller binds to buffers of its own) get no
// offset, nor do their aliases.
//
// Reuse is safe on the GPU because the scheduler places barriers by byte range: a value written
// into bytes that an earlier dispatch still reads gets a write-after-read barrier. Reuse is also
// free: a value's bytes stay reserved past its last use until the next barrier the step needs
// anyway (a read of a value written since the previous barrier, judged from the dispatches'
// bindings), so no write-after-read barrier is ever added by sharing bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace doppler::passes {

struct MemoryPlan {
  size_t arena_bytes = 0;  // the arena's size (0 when no value lives in it)
  // Offset in the arena of every value stored there: the values that own bytes, at offsets
  // aligned to graph::kPartAlignment, and their aliases (a part at its parent's offset plus its
  // range's, an in-place output at its input's).
  std::map<graph::ValueId, size_t> offset;
  size_t sum_of_values = 0;  // bytes the values that own arena bytes would take without reuse
};

// A value one dispatch binds, and whether the dispatch writes it.
struct Binding {
  graph::ValueId value;
  bool written;
};

// `dispatches`: the step's dispatches in order, each as the values it binds. Sources (input,
// param, const, state) and concat_rows always live outside the arena; `outside` names more values
// the caller binds to buffers of its own (say a step output shared between plans). Sizes are
// graph::ValueBytes(node, tokens) rounded up to 16 bytes.
absl::StatusOr<MemoryPlan> PlanMemory(const graph::Graph& g, const std::vector<std::vector<Binding>>& dispatches,
                                      int64_t tokens, const std::set<graph::ValueId>& outside = {});

// Whether a node's value lives outside any arena whatever the caller says: sources and concat_rows.
bool IsExternalKind(graph::OpKind kind);

// The value whose bytes `id` uses: itself, or (through parts and in-place updates) its base.
graph::ValueId StorageBase(const graph::Graph& g, graph::ValueId id);

}  // namespace doppler::passes
