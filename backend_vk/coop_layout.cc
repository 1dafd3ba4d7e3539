#include "backend_vk/coop_layout.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend_vk/context.h"
#include "codegen/shader_compiler.h"

namespace doppler::vk {
namespace {

// One subgroup loads, from shared memory, a fragment of `bits`-bit floats whose value at (row,
// column) is its index row · COLS + column, and writes its lanes' elements out in order: lane l's
// element e at l · COLS / 2 + e.
std::string ProbeShader(int cols, int bits) {
  const char* scalar = bits == 16 ? "float16_t" : "float";
  return absl::StrCat(R"(#version 460
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
layout(local_size_x = 32) in;
layout(std430, binding = 0) writeonly buffer Out { float elements[]; };
const uint COLS = )",
                      cols, "u;\nshared ", scalar, " indices[16u * COLS];\n", R"(void main() {
  uint lane = gl_LocalInvocationID.x;
  for (uint i = lane; i < 16u * COLS; i += 32u) indices[i] = )", scalar, R"((float(i));
  barrier();
  fcoopmatNV<)", bits, R"(, gl_ScopeSubgroup, 16, COLS> f;
  coopMatLoadNV(f, indices, 0u, COLS, false);
  for (int e = 0; e < f.length(); ++e) elements[lane * (COLS / 2u) + uint(e)] = float(f[e]);
}
)");
}

absl::StatusOr<bool> CheckShape(Context& ctx, int cols, int bits) {
  absl::StatusOr<codegen::CompiledShader> shader = codegen::CompileComputeShader(ProbeShader(cols, bits));
  if (!shader.ok()) return shader.status();
  const size_t count = 32 * static_cast<size_t>(cols) / 2;
  absl::StatusOr<std::unique_ptr<Buffer>> out = ctx.CreateBuffer(count * sizeof(float), BufferKind::kDeviceLocal,
                                                                 "coop layout check");
  if (!out.ok()) return out.status();
  // Elements a lane does not hold stay -1, which no index is.
  std::vector<float> elements(count, -1.0f);
  if (absl::Status s = ctx.Upload(**out, 0, elements.data(), count * sizeof(float)); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<ComputePipeline>> pipeline = ctx.CreatePipeline(*shader, "coop layout check");
  if (!pipeline.ok()) return pipeline.status();
  const BufferBinding bindings[] = {{0, out->get()}};
  absl::StatusOr<VkDescriptorSet> set = ctx.AllocateDescriptorSet(**pipeline, bindings);
  if (!set.ok()) return set.status();
  absl::StatusOr<std::unique_ptr<CommandBuffer>> cmd = ctx.CreateCommandBuffer("coop layout check");
  if (!cmd.ok()) return cmd.status();
  if (absl::Status s = (*cmd)->Begin(); !s.ok()) return s;
  (*cmd)->BindPipeline(**pipeline);
  (*cmd)->BindDescriptorSet(*set);
  (*cmd)->Dispatch(1);
  if (absl::Status s = (*cmd)->End(); !s.ok()) return s;
  if (absl::Status s = ctx.Submit(**cmd); !s.ok()) return s;
  if (absl::Status s = ctx.Download(**out, 0, elements.data(), count * sizeof(float)); !s.ok()) return s;
  return HoldsMmaLayout(elements, cols);
}

}  // namespace

bool HoldsMmaLayout(std::span<const float> elements, int cols) {
  if ((cols != 8 && cols != 16) || elements.size() != 32 * static_cast<size_t>(cols) / 2) return false;
  const int per_lane = cols / 2;
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int e = 0; e < per_lane; ++e) {
      const int row = g + 8 * (e / (cols / 4)), col = 2 * t + e % 2 + 8 * ((e / 2) % (cols / 8));
      if (elements[lane * per_lane + e] != static_cast<float>(row * cols + col)) return false;
    }
  }
  return true;
}

absl::StatusOr<bool> CheckCoopFragmentLayout(Context& ctx, bool with_16x8) {
  for (int cols : {16, 8}) {
    if (cols == 8 && !with_16x8) continue;
    absl::StatusOr<bool> holds = CheckShape(ctx, cols, 16);
    if (!holds.ok() || !*holds) return holds;
  }
  return true;
}

absl::StatusOr<bool> CheckCoopAccumulatorLayout(Context& ctx) { return CheckShape(ctx, 16, 32); }

}  // namespace doppler::vk
