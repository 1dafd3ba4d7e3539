#include "tests/support/compiled_kernel.h"

#include "absl/strings/str_cat.h"

namespace doppler::test {

codegen::TargetCaps NvidiaCoopCaps() {
  codegen::TargetCaps caps;
  caps.subgroup_size = 32;
  caps.min_subgroup_size = 32;
  caps.subgroup_arithmetic = true;
  caps.coop_matrix_nv = true;
  caps.max_shared_memory = 49152;
  caps.max_workgroup_invocations = 1024;
  return caps;
}

absl::StatusOr<CompiledKernel> EmitAndCompile(const graph::Graph& g, const graph::Node& n,
                                              const codegen::TargetCaps& caps, int64_t tokens) {
  absl::StatusOr<std::vector<codegen::Kernel>> ks = codegen::EmitKernels(g, n, caps, tokens);
  if (!ks.ok()) return ks.status();
  if (ks->size() != 1) {
    return absl::InternalError(absl::StrCat("node '", n.label, "': ", ks->size(), " kernels, not one"));
  }
  absl::StatusOr<codegen::CompiledShader> spirv = codegen::CompileComputeShader(ks->front().glsl, {});
  if (!spirv.ok()) return absl::InternalError(absl::StrCat(ks->front().variant, ": ", spirv.status().message()));
  return CompiledKernel{std::move(ks->front()), *std::move(spirv)};
}

}  // namespace doppler::test
