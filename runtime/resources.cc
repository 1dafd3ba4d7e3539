#include "runtime/resources.h"

#include <cstdio>
#include <cstring>

#include "absl/strings/str_format.h"
#include "codegen/device_layout.h"

namespace doppler::runtime {
namespace {

bool IsResource(graph::OpKind k) {
  return k == graph::OpKind::kParam || k == graph::OpKind::kConst || k == graph::OpKind::kState ||
         k == graph::OpKind::kConcatRows;
}

// The bytes of a weight: a param's from the store, a const's from the graph, a concat_rows' by
// stacking its inputs' rows (a row is whole blocks, so this holds for block formats too).
absl::StatusOr<std::vector<uint8_t>> WeightBytes(const graph::Graph& g, const graph::Node& n,
                                                 const ParamBytesFn& param_bytes) {
  switch (n.kind) {
    case graph::OpKind::kParam:
      return param_bytes(n);
    case graph::OpKind::kConst: {
      const std::vector<float>& data = *g.const_data(n.attrs.Str("name"));
      std::vector<uint8_t> bytes(data.size() * sizeof(float));
      std::memcpy(bytes.data(), data.data(), bytes.size());
      return bytes;
    }
    default: {  // kConcatRows
      std::vector<uint8_t> bytes;
      for (graph::ValueId in : n.inputs) {
        absl::StatusOr<std::vector<uint8_t>> part = WeightBytes(g, g.node(in), param_bytes);
        if (!part.ok()) return part.status();
        bytes.insert(bytes.end(), part->begin(), part->end());
      }
      return bytes;
    }
  }
}

// A resource some kernel reads (a weight read only by concat_rows needs no buffer of its own).
bool ReadByKernels(const graph::Graph& g, const graph::Node& n) {
  for (graph::ValueId u : g.Users(n.id)) {
    if (g.node(u).kind != graph::OpKind::kConcatRows) return true;
  }
  for (const auto& [name, id] : g.outputs()) {
    if (id == n.id) return true;
  }
  return false;
}

// A resource's bytes on the device, in rows of the last dimension's values (codegen/device_layout.h
// lays weights out by rows).
uint64_t DeviceBytes(const graph::Node& n) {
  const int64_t k = n.type.shape.empty() ? 1 : n.type.shape.back().value;
  return codegen::DeviceByteSize(n.type.dtype, graph::NumElements(n.type.shape, 0), k);
}

}  // namespace

ResourceBytes ResourceBytesOf(const graph::Graph& g) {
  ResourceBytes r;
  for (const graph::Node& n : g.nodes()) {
    if (!IsResource(n.kind) || !ReadByKernels(g, n)) continue;
    r.total += DeviceBytes(n);
    if (n.kind == graph::OpKind::kState) r.cache += DeviceBytes(n);
  }
  return r;
}

absl::Status CreateResources(vk::Context& ctx, const graph::Graph& g, const ParamBytesFn& param_bytes,
                             Resources& resources, bool progress) {
  std::vector<const graph::Node*> todo;
  for (const graph::Node& n : g.nodes()) {
    if (IsResource(n.kind) && resources.count(n.attrs.Str("name")) == 0 && ReadByKernels(g, n)) todo.push_back(&n);
  }
  auto bytes_of = DeviceBytes;
  // Everything at once against the device's memory before any of it is allocated: the KV cache
  // grows with the context, so a -c too large for the device is one clear error.
  uint64_t total = 0, cache = 0;
  for (const graph::Node* n : todo) {
    total += bytes_of(*n);
    if (n->kind == graph::OpKind::kState) cache += bytes_of(*n);
  }
  const uint64_t device = ctx.info().device_local_bytes;
  if (device > 0 && total > device) {
    constexpr double kMiB = 1024.0 * 1024.0;
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the weights and caches need %.0f MiB (%.0f MiB of them the caches, which grow with -c, --ctx-size), more "
        "than the %.0f MiB of memory of %s",
        static_cast<double>(total) / kMiB, static_cast<double>(cache) / kMiB, static_cast<double>(device) / kMiB,
        ctx.info().name));
  }
  for (size_t i = 0; i < todo.size(); ++i) {
    const graph::Node& n = *todo[i];
    const std::string& name = n.attrs.Str("name");
    const int64_t k = n.type.shape.empty() ? 1 : n.type.shape.back().value;
    const size_t bytes = bytes_of(n);
    absl::StatusOr<std::unique_ptr<vk::Buffer>> buf = ctx.CreateBuffer(bytes, vk::BufferKind::kDeviceLocal, name);
    if (!buf.ok()) return buf.status();
    if (n.kind == graph::OpKind::kState) {
      if (absl::Status s = ctx.Fill(**buf, 0); !s.ok()) return s;
    } else {
      absl::StatusOr<std::vector<uint8_t>> stored = WeightBytes(g, n, param_bytes);
      if (!stored.ok()) return stored.status();
      const std::vector<uint8_t> data = codegen::ToDeviceLayout(n.type.dtype, k, *std::move(stored));
      if (absl::Status s = ctx.Upload(**buf, 0, data.data(), data.size()); !s.ok()) return s;
    }
    resources[name] = *std::move(buf);
    if (progress) std::fprintf(stderr, "\rloading weights %zu/%zu%s", i + 1, todo.size(), i + 1 == todo.size() ? "\n" : "");
  }
  return absl::OkStatus();
}

std::map<graph::ValueId, vk::Buffer*> BindResources(const graph::Graph& g, const Resources& resources) {
  std::map<graph::ValueId, vk::Buffer*> bound;
  for (const graph::Node& n : g.nodes()) {
    if (!IsResource(n.kind)) continue;
    auto it = resources.find(n.attrs.Str("name"));
    if (it != resources.end()) bound[n.id] = it->second.get();
  }
  return bound;
}

}  // namespace doppler::runtime
