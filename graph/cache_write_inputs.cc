#include "graph/cache_write_inputs.h"

namespace doppler::graph {

CacheWriteInputs CacheWriteInputsOf(const Node& n) {
  CacheWriteInputs c;
  auto at = [&](size_t i) { return i < n.inputs.size() ? n.inputs[i] : ValueId{-1}; };
  c.cache = at(0);
  c.x = at(1);
  if (n.inputs.size() >= 3) c.rope = at(2);
  if (n.inputs.size() >= 4) c.x_norm = at(3);
  return c;
}

std::vector<ValueId> CacheWriteInputList(const CacheWriteInputs& c) {
  std::vector<ValueId> in = {c.cache, c.x};
  for (const std::optional<ValueId>& v : {c.rope, c.x_norm}) {
    if (v) in.push_back(*v);
  }
  return in;
}

}  // namespace doppler::graph
