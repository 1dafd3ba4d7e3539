#include "passes/memory_plan.h"

#include <algorithm>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "graph/layout.h"

namespace doppler::passes {
namespace {

using graph::Node;
using graph::OpKind;
using graph::ValueId;

size_t AlignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

bool IsAlias(const Node& n) { return n.kind == OpKind::kPart || graph::GetOpDef(n.kind).updates_input0; }

// A range of a value's bytes with a lifetime of its own: the whole value, or one column group
// of a split value (a part that dies early frees its range while the others still live).
struct Segment {
  size_t rel;    // bytes from the value's start
  size_t bytes;
  int first, last;  // dispatch positions, inclusive (kUnused: none binds it)
};

constexpr int kUnused = std::numeric_limits<int>::max();

struct Item {
  ValueId id;
  size_t bytes;  // the whole value
  std::vector<Segment> segments;
  size_t offset = 0;
};

struct Placed {
  size_t begin, end;
  int first, last;
};

// Which bytes a value reads or writes: (base, segment), segment -1 for all of the base.
struct Use {
  ValueId base;
  int segment;
};

Use Resolve(const graph::Graph& g, ValueId id) {
  const Node& n = g.node(id);
  if (n.kind == OpKind::kPart) return {Resolve(g, n.inputs[0]).base, static_cast<int>(n.attrs.Int("index"))};
  if (graph::GetOpDef(n.kind).updates_input0) return Resolve(g, n.inputs[0]);
  return {id, -1};
}

}  // namespace

bool IsExternalKind(OpKind k) {
  return k == OpKind::kInput || k == OpKind::kParam || k == OpKind::kConst || k == OpKind::kState ||
         k == OpKind::kConcatRows;
}

ValueId StorageBase(const graph::Graph& g, ValueId id) {
  while (IsAlias(g.node(id)) && !g.node(id).inputs.empty()) id = g.node(id).inputs[0];
  return id;
}

absl::StatusOr<MemoryPlan> PlanMemory(const graph::Graph& g, const std::vector<std::vector<Binding>>& dispatches,
                                      int64_t tokens, const std::set<ValueId>& outside) {
  const int n_nodes = g.size();
  const int end_of_step = static_cast<int>(dispatches.size());  // outputs are read after the last dispatch
  for (const Node& n : g.nodes()) {
    if (IsAlias(n) && n.inputs.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("memory plan: ", graph::OpName(n.kind), " node %", n.id, " has no input"));
    }
    if (n.kind != OpKind::kPart) continue;
    const Node& parent = g.node(n.inputs[0]);
    const size_t parts = graph::SplitWidths(parent).size();
    if (!n.attrs.Has("index") || n.attrs.Int("index") < 0 || static_cast<size_t>(n.attrs.Int("index")) >= parts ||
        IsAlias(parent) || parent.type.shape.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("memory plan: part %", n.id, " reads no column group of %", parent.id, " (", parts, " parts)"));
    }
  }
  for (size_t d = 0; d < dispatches.size(); ++d) {
    for (const Binding& b : dispatches[d]) {
      if (b.value < 0 || b.value >= n_nodes) {
        return absl::InvalidArgumentError(absl::StrCat("memory plan: dispatch ", d, " binds %", b.value,
                                                       ", which is not a value of the graph"));
      }
    }
  }

  // Every value of the step with bytes of its own, and its segments; their lifetimes start empty.
  std::vector<int> item_of(static_cast<size_t>(n_nodes), -1);
  std::vector<Item> items;
  MemoryPlan plan;
  for (const Node& n : g.nodes()) {
    if (IsExternalKind(n.kind) || IsAlias(n) || outside.count(n.id) > 0) continue;
    Item it{n.id, AlignUp(std::max<size_t>(1, graph::ValueBytes(n, tokens)), 16), {}};
    const std::vector<int64_t> widths = graph::SplitWidths(n);
    if (!widths.empty()) {
      for (const graph::PartRange& r : graph::SplitLayout(widths, n.type.shape[0].Resolve(tokens), n.type.dtype)) {
        it.segments.push_back({r.offset, AlignUp(std::max<size_t>(1, r.bytes), 16), kUnused, -1});
      }
    }
    // The kernel that writes a split value binds the whole of it, the gaps between groups included.
    it.segments.push_back({0, it.bytes, kUnused, -1});
    item_of[static_cast<size_t>(n.id)] = static_cast<int>(items.size());
    items.push_back(std::move(it));
  }
  auto touch = [&](ValueId id, int pos) {
    const Use u = Resolve(g, id);
    const int i = item_of[static_cast<size_t>(u.base)];
    if (i < 0) return;  // lives outside the arena
    std::vector<Segment>& segs = items[static_cast<size_t>(i)].segments;
    for (size_t s = 0; s < segs.size(); ++s) {
      if (u.segment >= 0 && static_cast<size_t>(u.segment) != s) continue;
      segs[s].first = std::min(segs[s].first, pos);
      segs[s].last = std::max(segs[s].last, pos);
    }
  };
  for (size_t d = 0; d < dispatches.size(); ++d) {
    for (const Binding& b : dispatches[d]) touch(b.value, static_cast<int>(d));
  }
  for (const auto& [name, id] : g.outputs()) touch(id, end_of_step);

  // Reused bytes must not cost barriers: bytes read by a dispatch are only free again once a
  // barrier that the step needs anyway has passed. Those barriers are where a dispatch reads or
  // writes a value written since the previous one, or writes one read since then (as the
  // scheduler places them, with every value in bytes of its own); a segment stays allocated until
  // the dispatch before the first such barrier after its last use.
  std::vector<int> next_barrier(dispatches.size() + 1, end_of_step);
  {
    std::vector<int> written_epoch(static_cast<size_t>(n_nodes), -1), read_epoch(static_cast<size_t>(n_nodes), -1);
    std::vector<bool> barrier(dispatches.size(), false);
    int epoch = 0;
    for (size_t d = 0; d < dispatches.size(); ++d) {
      bool hazard = false;
      for (const Binding& b : dispatches[d]) {
        const size_t base = static_cast<size_t>(StorageBase(g, b.value));
        hazard = hazard || written_epoch[base] == epoch || (b.written && read_epoch[base] == epoch);
      }
      if (hazard) {
        ++epoch;
        barrier[d] = true;
      }
      for (const Binding& b : dispatches[d]) {
        const size_t base = static_cast<size_t>(StorageBase(g, b.value));
        (b.written ? written_epoch : read_epoch)[base] = epoch;
      }
    }
    for (int i = end_of_step - 1; i >= 0; --i) {
      next_barrier[static_cast<size_t>(i)] = barrier[static_cast<size_t>(i)] ? i : next_barrier[static_cast<size_t>(i) + 1];
    }
  }
  // A value no dispatch binds (one its reader computes from its inputs, say) needs no bytes of its
  // own: it is placed at offset 0, where nothing ever reads or writes it.
  std::vector<Item> unbound;
  for (Item& it : items) {
    if (it.segments.back().first == kUnused) {
      unbound.push_back(it);
      continue;
    }
    plan.sum_of_values += it.bytes;
    for (Segment& s : it.segments) {
      if (s.first == kUnused) s.first = s.last = it.segments.back().first;  // a group no dispatch reads
      if (s.last < end_of_step) s.last = next_barrier[static_cast<size_t>(s.last) + 1] - 1;
    }
  }
  std::erase_if(items, [](const Item& it) { return it.segments.back().first == kUnused; });

  // Largest first, each at the lowest aligned offset where none of its segments meets the bytes of
  // a placed segment that is live at the same time. That offset is 0 or puts one of its segments
  // right after (aligned) such a placed segment.
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return items[a].bytes > items[b].bytes; });
  std::vector<Placed> placed;
  for (size_t i : order) {
    Item& it = items[i];
    std::vector<std::pair<const Placed*, const Segment*>> conflicts;  // live at the same time
    std::vector<size_t> candidates = {0};
    for (const Placed& p : placed) {
      for (const Segment& s : it.segments) {
        if (p.first > s.last || s.first > p.last) continue;
        conflicts.push_back({&p, &s});
        const size_t after = AlignUp(p.end, graph::kPartAlignment);
        if (after >= s.rel) candidates.push_back(after - s.rel);
      }
    }
    std::sort(candidates.begin(), candidates.end());
    for (size_t c : candidates) {
      bool clear = true;
      for (const auto& [p, s] : conflicts) {
        if (c + s->rel < p->end && p->begin < c + s->rel + s->bytes) {
          clear = false;
          break;
        }
      }
      if (clear) {
        it.offset = c;
        break;
      }
    }
    for (const Segment& s : it.segments) placed.push_back({it.offset + s.rel, it.offset + s.rel + s.bytes, s.first, s.last});
    plan.arena_bytes = std::max(plan.arena_bytes, it.offset + it.bytes);
    plan.offset[it.id] = it.offset;
  }

  for (const Item& it : unbound) {
    plan.offset[it.id] = 0;
    plan.arena_bytes = std::max(plan.arena_bytes, it.bytes);
  }

  // Aliases, in node order (a base precedes its aliases).
  for (const Node& n : g.nodes()) {
    if (!IsAlias(n) || outside.count(n.id) > 0) continue;
    auto base = plan.offset.find(n.inputs[0]);
    if (base == plan.offset.end()) continue;  // the base lives outside the arena
    size_t offset = base->second;
    if (n.kind == OpKind::kPart) {
      const Node& parent = g.node(n.inputs[0]);
      offset += graph::SplitLayout(graph::SplitWidths(parent), parent.type.shape[0].Resolve(tokens),
                                   parent.type.dtype)[static_cast<size_t>(n.attrs.Int("index"))]
                    .offset;
    }
    plan.offset[n.id] = offset;
  }
  return plan;
}

}  // namespace doppler::passes
