// Attention's inputs by role. After q and the k and v caches come, when present: a rope table (q
// is rotated as it is loaded) and then a head norm's weight (each head of q is normalised first).
// With attr append = 1 (fuse-kv-append), the step's new keys and values follow, and after them,
// with attr k_norm_eps, a head norm's weight for the keys: the op first writes them to the caches,
// as the k and v cache_write nodes it absorbed did (AppendedCacheWrites), then attends. With attr
// sinks = 1 the last input of all is the heads' sink logits, f32[heads].
#pragma once

#include <array>
#include <optional>
#include <vector>

#include "graph/graph.h"

namespace doppler::graph {

struct AttentionInputs {
  ValueId q = -1, k_cache = -1, v_cache = -1;
  std::optional<ValueId> rope, q_norm;
  std::optional<ValueId> k_new, v_new, k_norm;  // with append
  std::optional<ValueId> sinks;                  // with sinks
};

AttentionInputs AttentionInputsOf(const Node& attention);
// The inputs in the order above (a pass changes the roles, then rebuilds the list); the attrs
// append and sinks must say which are present.
std::vector<ValueId> AttentionInputList(const AttentionInputs& a);
// How many inputs follow the plain ones for these attrs: 0, or 2 or 3 with append.
size_t AppendedInputCount(const Attrs& attrs);

// For an appending attention: the cache_write nodes it stands for, k then v, as fuse-kv-append
// found them: (k cache, k[, rope table[, k norm weight]]) with rope's attrs for the kv heads and
// the norm's, and (v cache, v). Their ids are the attention's (they are not in the graph).
std::array<Node, 2> AppendedCacheWrites(const Graph& g, const Node& attention);

// The same attention without its appended inputs (append = 0): what it attends once its cache
// writes are done. Its id is the attention's (it is not in the graph).
Node PlainAttention(const Node& attention);

}  // namespace doppler::graph
