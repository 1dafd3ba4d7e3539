#include "tokenizers/bpe_merge.h"

#include <queue>
#include <tuple>

namespace doppler::tokenizers {
namespace {

struct Candidate {
  double priority;
  size_t left;  // index of the left symbol; merging keeps the left index, so this orders by position
  int32_t left_id;
  int32_t right_id;
  int32_t merged;

  bool operator>(const Candidate& other) const {
    return std::tie(priority, left) > std::tie(other.priority, other.left);
  }
};

struct Symbol {
  int32_t id;
  size_t prev;  // kNone at the ends
  size_t next;
};

constexpr size_t kNone = static_cast<size_t>(-1);

}  // namespace

void MergeSymbols(std::vector<int32_t>& symbols, MergeLookup lookup) {
  if (symbols.size() < 2) return;
  std::vector<Symbol> list(symbols.size());
  for (size_t i = 0; i < symbols.size(); ++i) {
    list[i] = {symbols[i], i == 0 ? kNone : i - 1, i + 1 == symbols.size() ? kNone : i + 1};
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](size_t left) {
    if (left == kNone || list[left].next == kNone) return;
    const int32_t left_id = list[left].id, right_id = list[list[left].next].id;
    if (std::optional<MergeStep> step = lookup(left_id, right_id)) {
      heap.push({step->priority, left, left_id, right_id, step->merged});
    }
  };
  for (size_t i = 0; i + 1 < list.size(); ++i) consider(i);

  std::vector<bool> removed(list.size(), false);
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    // Entries go stale when a neighbour merged first; the current ids tell.
    if (removed[top.left] || list[top.left].next == kNone) continue;
    const size_t right = list[top.left].next;
    if (list[top.left].id != top.left_id || list[right].id != top.right_id) continue;
    list[top.left].id = top.merged;
    removed[right] = true;
    list[top.left].next = list[right].next;
    if (list[right].next != kNone) list[list[right].next].prev = top.left;
    consider(list[top.left].prev);
    consider(top.left);
  }
  symbols.clear();
  for (size_t i = 0; i != kNone; i = list[i].next) symbols.push_back(list[i].id);
}

}  // namespace doppler::tokenizers
