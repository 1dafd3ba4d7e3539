#include "runtime/resources.h"

namespace doppler::runtime {
namespace {

bool IsResource(graph::OpKind k) {
  return k == graph::OpKind::kParam || k == graph::OpKind::kConst || k == graph::OpKind::kState;
}

}  // namespace

absl::Status CreateResources(vk::Context& ctx, const graph::Graph& g, const ParamBytesFn& param_bytes,
                             Resources& resources, const std::function<void(size_t, size_t)>& progress) {
  std::vector<const graph::Node*> todo;
  for (const graph::Node& n : g.nodes()) {
    if (IsResource(n.kind) && resources.count(n.attrs.Str("name")) == 0) todo.push_back(&n);
  }
  for (size_t i = 0; i < todo.size(); ++i) {
    const graph::Node& n = *todo[i];
    const std::string& name = n.attrs.Str("name");
    const size_t bytes = graph::ByteSize(n.type.dtype, graph::NumElements(n.type.shape, 0));
    absl::StatusOr<std::unique_ptr<vk::Buffer>> buf = ctx.CreateBuffer(bytes, vk::BufferKind::kDeviceLocal, name);
    if (!buf.ok()) return buf.status();
    absl::Status s;
    if (n.kind == graph::OpKind::kParam) {
      absl::StatusOr<std::vector<uint8_t>> data = param_bytes(n);
      if (!data.ok()) return data.status();
      s = ctx.Upload(**buf, 0, data->data(), data->size());
    } else if (n.kind == graph::OpKind::kConst) {
      s = ctx.Upload(**buf, 0, g.const_data(name)->data(), bytes);
    } else {
      s = ctx.Fill(**buf, 0);
    }
    if (!s.ok()) return s;
    resources[name] = *std::move(buf);
    if (progress) progress(i + 1, todo.size());
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
