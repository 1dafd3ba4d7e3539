// The device-independent half of the scheduler: where every value of a plan lives (a range of the
// plan's arena, or of a buffer the caller binds), which bytes each dispatch reads and writes, and
// where barriers go. Plan::Build and Plan::Record use it; so does `doppler graph --stats`, which
// needs no GPU. Nothing here calls Vulkan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/kernel.h"
#include "graph/graph.h"

namespace doppler::vk {

// Where the memory planner put the plan's own activations: one arena of `bytes`, and the offset in
// it of every value stored there (aliases included: parts and in-place outputs).
struct ArenaLayout {
  size_t bytes = 0;
  std::map<graph::ValueId, size_t> offsets;
};

// Buffers are told apart by an opaque nonzero id; kArenaBuffer is the plan's arena.
constexpr uint64_t kArenaBuffer = 0;
constexpr size_t kToTheEnd = std::numeric_limits<size_t>::max();

struct ValueLocation {
  uint64_t buffer = kArenaBuffer;
  size_t offset = 0;
  size_t bytes = kToTheEnd;  // kToTheEnd: the rest of the buffer (a value the caller binds whole)
};

// The location of every value of `g` (by id) for a bucket of `tokens`. A value in `external`
// (every param, const, concat_rows and state, and the inputs and outputs the caller shares) is the
// whole buffer given; a part is a range of its split parent; the output of an op that updates its
// first input in place is that input; every other value is its range of the arena. A source
// missing from `external`, or a value missing from the arena, is an error.
absl::StatusOr<std::vector<ValueLocation>> LocateValues(const graph::Graph& g, int64_t tokens,
                                                        const ArenaLayout& arena,
                                                        const std::map<graph::ValueId, uint64_t>& external);

struct ByteRange {
  uint64_t buffer = 0;
  size_t begin = 0, end = 0;  // [begin, end)
};

struct DispatchAccess {
  std::vector<ByteRange> reads, writes;
};

// The bytes a kernel's bindings touch.
DispatchAccess AccessOf(const codegen::Kernel& kernel, const std::vector<ValueLocation>& locations);

// For each dispatch, in order: whether a barrier precedes it. A barrier goes before a dispatch that
// reads or writes bytes an earlier dispatch wrote since the last barrier (read-after-write,
// write-after-write), or writes bytes read since then (write-after-read); nowhere else.
std::vector<bool> PlaceBarriers(const std::vector<DispatchAccess>& dispatches);

// Whether a node of this kind runs a kernel (sources, concat_rows and parts do not).
bool Dispatches(graph::OpKind kind);

}  // namespace doppler::vk
