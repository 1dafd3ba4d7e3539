// Every kernel of every replayed model's plans (tests/support/replay_models.h) for the device
// classes nothing here runs on: the AMD-like, Intel-like and generic capabilities of
// codegen/known_targets.h. Each kernel must be emitted, compile to SPIR-V and fit the device: its
// workgroup within maxComputeWorkGroupInvocations and its shared variables within
// maxComputeSharedMemorySize. (The NVIDIA-like and lavapipe kernels are the process-replay
// golden's, and run in the GPU and lavapipe tests.)
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "codegen/known_targets.h"
#include "codegen/lowering.h"
#include "codegen/shader_compiler.h"
#include "codegen/spirv_cache.h"
#include "tests/support/compiled_kernel.h"
#include "tests/support/replay_models.h"

namespace doppler {
namespace {

TEST(DeviceClassKernelsSupport, SharedMemoryBytesSumsTheSharedVariables) {
  absl::StatusOr<codegen::CompiledShader> spirv = codegen::CompileComputeShader(R"(#version 460
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) buffer Y { float y[]; };
shared float a[100];
shared uvec2 b[10];
shared f16vec4 c[3][5];
shared struct { vec3 v; uint n; } s[2];
void main() {
  a[gl_LocalInvocationIndex % 100u] = 1.0;
  b[gl_LocalInvocationIndex % 10u] = uvec2(1u);
  c[1][gl_LocalInvocationIndex % 5u] = f16vec4(1.0);
  s[1].n = 1u;
  barrier();
  y[gl_LocalInvocationIndex] = a[0] + float(b[1].x) + float(c[1][2].x) + float(s[1].n);
}
)");
  ASSERT_TRUE(spirv.ok()) << spirv.status();
  absl::StatusOr<uint64_t> bytes = test::SharedMemoryBytes(spirv->spirv);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, 100 * 4 + 10 * 8 + 15 * 8 + 2 * 16);
}

class DeviceClassKernels : public testing::TestWithParam<codegen::TargetCaps> {};

TEST_P(DeviceClassKernels, EveryKernelCompilesAndFitsTheDevice) {
  unsetenv("DOPPLER_TUNE");  // the choices codegen/tuning/ makes for the class
  const codegen::TargetCaps& caps = GetParam();
  std::set<uint64_t> compiled;  // the GLSL of kernels compiled already (models share many)
  int failures = 0;
  for (test::ReplayModel m : test::ReplayModels()) {
    absl::StatusOr<test::ModelGraphs> graphs = test::BuildModelGraphs(m);
    ASSERT_TRUE(graphs.ok()) << m.name << ": " << graphs.status();
    if (!graphs->not_built.empty()) continue;
    absl::StatusOr<std::vector<test::ReplayPlan>> plans = test::ReplayPlans(m, *graphs, caps);
    ASSERT_TRUE(plans.ok()) << m.name << ": " << plans.status();
    for (const test::ReplayPlan& plan : *plans) {
      const std::string where = absl::StrCat(m.name, " ", plan.name, ":T=", plan.tokens);
      absl::StatusOr<std::vector<codegen::Dispatch>> dispatches = codegen::Lower(plan.graph, caps, plan.tokens);
      if (!dispatches.ok()) {
        ADD_FAILURE() << where << ": " << dispatches.status();
        ++failures;
        continue;
      }
      for (const codegen::Dispatch& d : *dispatches) {
        const codegen::Kernel& k = d.kernel;
        if (!compiled.insert(codegen::Fnv1a64(k.glsl)).second) continue;
        const std::string kernel = absl::StrCat(where, " ", plan.graph.node(d.node).label, " ", k.family, ".", k.variant);
        absl::StatusOr<codegen::CompiledShader> spirv = codegen::CompileComputeShader(k.glsl);
        if (!spirv.ok()) {
          ADD_FAILURE() << kernel << ": " << spirv.status();
          ++failures;
          continue;
        }
        const uint64_t invocations = uint64_t{spirv->local_size[0]} * spirv->local_size[1] * spirv->local_size[2];
        EXPECT_LE(invocations, caps.max_workgroup_invocations) << kernel;
        absl::StatusOr<uint64_t> shared = test::SharedMemoryBytes(spirv->spirv);
        ASSERT_TRUE(shared.ok()) << kernel << ": " << shared.status();
        EXPECT_LE(*shared, caps.max_shared_memory) << kernel;
        failures += invocations > caps.max_workgroup_invocations || *shared > caps.max_shared_memory;
      }
      ASSERT_LT(failures, 20) << "and more";
    }
  }
  std::printf("%s: %zu distinct kernels compiled\n", codegen::DeviceClassName(caps.device_class), compiled.size());
}

INSTANTIATE_TEST_SUITE_P(Classes, DeviceClassKernels,
                         testing::Values(codegen::AmdLikeCaps(), codegen::IntelArcLikeCaps(), codegen::GenericCaps()),
                         [](const testing::TestParamInfo<codegen::TargetCaps>& info) {
                           return std::string(codegen::DeviceClassName(info.param.device_class));
                         });

}  // namespace
}  // namespace doppler
