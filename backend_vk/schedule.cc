#include "backend_vk/schedule.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "graph/layout.h"

namespace doppler::vk {
namespace {

using graph::OpKind;

bool IsSource(OpKind k) {
  return k == OpKind::kParam || k == OpKind::kConst || k == OpKind::kState || k == OpKind::kInput ||
         k == OpKind::kConcatRows;
}

ByteRange RangeOf(const ValueLocation& l) {
  return {l.buffer, l.offset, l.bytes == kToTheEnd ? kToTheEnd : l.offset + l.bytes};
}

bool Overlaps(const std::vector<ByteRange>& ranges, const ByteRange& r) {
  for (const ByteRange& o : ranges) {
    if (o.buffer == r.buffer && o.begin < r.end && r.begin < o.end) return true;
  }
  return false;
}

}  // namespace

bool Dispatches(OpKind kind) { return !IsSource(kind) && kind != OpKind::kPart; }

absl::StatusOr<std::vector<ValueLocation>> LocateValues(const graph::Graph& g, int64_t tokens,
                                                        const ArenaLayout& arena,
                                                        const std::map<graph::ValueId, uint64_t>& external) {
  std::vector<ValueLocation> loc(static_cast<size_t>(g.size()));
  for (const graph::Node& n : g.nodes()) {
    const size_t id = static_cast<size_t>(n.id);
    if (auto it = external.find(n.id); it != external.end()) {
      loc[id] = ValueLocation{it->second, 0, kToTheEnd};
      continue;
    }
    if (IsSource(n.kind)) {
      // A weight only a load-time concat_rows reads is never bound.
      const std::vector<graph::ValueId> users = g.Users(n.id);
      if (std::all_of(users.begin(), users.end(),
                      [&](graph::ValueId u) { return g.node(u).kind == OpKind::kConcatRows; })) {
        continue;
      }
      return absl::InvalidArgumentError(absl::StrCat("no buffer given for ", graph::OpName(n.kind), " '",
                                                     n.attrs.Has("name") ? n.attrs.Str("name") : n.label, "'"));
    }
    if (graph::GetOpDef(n.kind).updates_input0) {
      loc[id] = loc[static_cast<size_t>(n.inputs[0])];
      continue;
    }
    if (n.kind == OpKind::kPart) {
      const graph::Node& parent = g.node(n.inputs[0]);
      const std::vector<graph::PartRange> parts =
          graph::SplitLayout(graph::SplitWidths(parent), parent.type.shape[0].Resolve(tokens), parent.type.dtype);
      const int64_t index = n.attrs.Int("index");
      if (index < 0 || static_cast<size_t>(index) >= parts.size()) {
        return absl::InvalidArgumentError(absl::StrCat("part %", n.id, " of %", parent.id, ": no column group ", index));
      }
      const graph::PartRange r = parts[static_cast<size_t>(index)];
      const ValueLocation& p = loc[static_cast<size_t>(parent.id)];
      loc[id] = ValueLocation{p.buffer, p.offset + r.offset, r.bytes};
      continue;
    }
    auto it = arena.offsets.find(n.id);
    if (it == arena.offsets.end()) {
      return absl::InvalidArgumentError(absl::StrCat("the arena layout has no place for %", n.id, " (",
                                                     graph::OpName(n.kind), " ", n.label, ")"));
    }
    const size_t bytes = graph::ValueBytes(n, tokens);
    if (it->second + bytes > arena.bytes) {
      return absl::InvalidArgumentError(absl::StrCat("%", n.id, " (", n.label, ") ends at byte ", it->second + bytes,
                                                     " of an arena of ", arena.bytes));
    }
    loc[id] = ValueLocation{kArenaBuffer, it->second, bytes};
  }
  return loc;
}

DispatchAccess AccessOf(const codegen::Kernel& kernel, const std::vector<ValueLocation>& locations) {
  DispatchAccess a;
  for (const codegen::KernelArg& arg : kernel.args) {
    (arg.written ? a.writes : a.reads).push_back(RangeOf(locations[static_cast<size_t>(arg.value)]));
  }
  return a;
}

std::vector<bool> PlaceBarriers(const std::vector<DispatchAccess>& dispatches) {
  std::vector<bool> barrier(dispatches.size(), false);
  std::vector<ByteRange> written, read;  // since the last barrier
  for (size_t i = 0; i < dispatches.size(); ++i) {
    const DispatchAccess& d = dispatches[i];
    bool hazard = false;
    for (const ByteRange& r : d.reads) hazard = hazard || Overlaps(written, r);
    for (const ByteRange& w : d.writes) hazard = hazard || Overlaps(written, w) || Overlaps(read, w);
    if (hazard) {
      written.clear();
      read.clear();
    }
    barrier[i] = hazard;
    read.insert(read.end(), d.reads.begin(), d.reads.end());
    written.insert(written.end(), d.writes.begin(), d.writes.end());
  }
  return barrier;
}

}  // namespace doppler::vk
