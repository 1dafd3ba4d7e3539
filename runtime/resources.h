// Device buffers for what a graph reads but no step writes from scratch: params (weights), consts
// and states (the KV cache). They are created once and shared, by name, by every plan of a model.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backend_vk/context.h"
#include "graph/graph.h"

namespace doppler::runtime {

using Resources = std::map<std::string, std::unique_ptr<vk::Buffer>>;

// The bytes of a param in its graph dtype.
using ParamBytesFn = std::function<absl::StatusOr<std::vector<uint8_t>>(const graph::Node& param)>;

// Creates a device-local buffer for every param (filled by `param_bytes`), const (filled from the
// graph), concat_rows (its inputs' rows stacked: weights fused by a pass, materialised once here)
// and state (zeroed) of `g` not yet in `resources` and read by some kernel. With `progress`, a line
// on stderr counts the buffers made ("loading weights 12/291").
absl::Status CreateResources(vk::Context& ctx, const graph::Graph& g, const ParamBytesFn& param_bytes,
                             Resources& resources, bool progress = false);

// What CreateResources allocates for `g` from nothing: in all, and the states (KV caches) of it.
struct ResourceBytes {
  uint64_t total = 0, cache = 0;
};
ResourceBytes ResourceBytesOf(const graph::Graph& g);

// The buffers a plan of `g` takes from `resources`: every param, const and state, by name.
std::map<graph::ValueId, vk::Buffer*> BindResources(const graph::Graph& g, const Resources& resources);

}  // namespace doppler::runtime
