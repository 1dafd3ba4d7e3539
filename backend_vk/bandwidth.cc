#include "backend_vk/bandwidth.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "absl/status/status.h"

namespace doppler::vk {
namespace {

constexpr const char* kCopyShader = R"(#version 460
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer Src { uvec4 src[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Dst { uvec4 dst[]; };
void main() {
  uint n = uint(src.length());
  for (uint i = gl_GlobalInvocationID.x; i < n; i += gl_NumWorkGroups.x * 256u) dst[i] = src[i];
}
)";

}  // namespace

absl::StatusOr<Bandwidth> MeasureCopyBandwidth(Context& ctx, PipelineCache& pipelines) {
  const bool gpu = ctx.info().type == "discrete GPU" || ctx.info().type == "integrated GPU";
  Bandwidth result;
  result.buffer_bytes = std::min<size_t>(gpu ? (size_t{256} << 20) : (size_t{16} << 20),
                                         ctx.info().max_storage_buffer_range & ~size_t{15});
  constexpr int kCopies = 10;
  absl::StatusOr<const ComputePipeline*> copy = pipelines.Get(kCopyShader, "bandwidth.copy");
  if (!copy.ok()) return copy.status();
  absl::StatusOr<std::unique_ptr<Buffer>> a = ctx.CreateBuffer(result.buffer_bytes, BufferKind::kDeviceLocal, "bandwidth.a");
  if (!a.ok()) return a.status();
  absl::StatusOr<std::unique_ptr<Buffer>> b = ctx.CreateBuffer(result.buffer_bytes, BufferKind::kDeviceLocal, "bandwidth.b");
  if (!b.ok()) return b.status();
  if (absl::Status s = ctx.Fill(**a, 0x3c003c00u); !s.ok()) return s;
  const BufferBinding a_to_b[] = {{0, a->get()}, {1, b->get()}}, b_to_a[] = {{0, b->get()}, {1, a->get()}};
  absl::StatusOr<VkDescriptorSet> forward = ctx.AllocateDescriptorSet(**copy, a_to_b, "bandwidth.a_to_b");
  if (!forward.ok()) return forward.status();
  absl::StatusOr<VkDescriptorSet> backward = ctx.AllocateDescriptorSet(**copy, b_to_a, "bandwidth.b_to_a");
  if (!backward.ok()) return backward.status();
  std::unique_ptr<TimestampPool> pool;
  if (ctx.info().timestamps) {
    absl::StatusOr<std::unique_ptr<TimestampPool>> p = ctx.CreateTimestampPool(2);
    if (!p.ok()) return p.status();
    pool = *std::move(p);
  }
  absl::StatusOr<std::unique_ptr<CommandBuffer>> cmd = ctx.CreateCommandBuffer("bandwidth");
  if (!cmd.ok()) return cmd.status();
  CommandBuffer& c = **cmd;
  // Enough workgroups to fill any GPU; each loops over the buffer.
  const uint32_t groups = static_cast<uint32_t>(std::min<size_t>(result.buffer_bytes / (16 * 256), 4096));
  if (absl::Status s = c.Begin(); !s.ok()) return s;
  if (pool) c.ResetTimestamps(*pool);
  c.BindPipeline(**copy);
  for (int i = 0; i <= kCopies; ++i) {  // copy 0 warms up
    if (i == 1 && pool) c.WriteTimestamp(*pool, 0);
    c.BindDescriptorSet(i % 2 == 0 ? *forward : *backward);
    c.Dispatch(groups);
    c.ComputeBarrier();
  }
  if (pool) c.WriteTimestamp(*pool, 1);
  if (absl::Status s = c.End(); !s.ok()) return s;
  const auto t0 = std::chrono::steady_clock::now();
  if (absl::Status s = ctx.Submit(c); !s.ok()) return s;
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * kCopies / (kCopies + 1);
  if (pool) {
    absl::StatusOr<std::vector<double>> ns = ctx.ReadTimestamps(*pool);
    if (!ns.ok()) return ns.status();
    seconds = ((*ns)[1] - (*ns)[0]) * 1e-9;
  }
  if (!(seconds > 0)) return absl::InternalError("the copy-bandwidth measurement took no time");
  result.bytes_per_second = 2.0 * static_cast<double>(result.buffer_bytes) * kCopies / seconds;
  return result;
}

}  // namespace doppler::vk
