// Kernels emitted for a device's capabilities and compiled to SPIR-V on this machine, for tests
// of kernels that only some devices run (they compile anywhere).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/kernel.h"
#include "codegen/shader_compiler.h"
#include "graph/graph.h"

namespace doppler::test {

// The capabilities of an NVIDIA GPU with VK_NV_cooperative_matrix (the H100's limits).
codegen::TargetCaps NvidiaCoopCaps();

struct CompiledKernel {
  codegen::Kernel kernel;
  codegen::CompiledShader spirv;
};

// The one kernel codegen emits for node `n` of `g` for `caps` and a bucket of `tokens`, compiled;
// an error if there is not exactly one, or it does not compile.
absl::StatusOr<CompiledKernel> EmitAndCompile(const graph::Graph& g, const graph::Node& n,
                                              const codegen::TargetCaps& caps, int64_t tokens);

// Bytes of the shared (Workgroup storage class) variables a SPIR-V module declares, each at its
// types' natural sizes (scalars and vectors packed, arrays of their elements): what a device's
// maxComputeSharedMemorySize must hold. An error for a type it cannot size.
absl::StatusOr<uint64_t> SharedMemoryBytes(const std::vector<uint32_t>& spirv);

}  // namespace doppler::test
