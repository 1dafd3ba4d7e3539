// The capabilities of known devices, one of each class (codegen/device_class.h), for what runs
// without one: the process-replay golden (NVIDIA and lavapipe), tests of tuning choices, tests that
// every kernel compiles for every class, and the compile benchmark.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "codegen/kernel.h"

namespace doppler::codegen {

// NVIDIA's Vulkan driver on an H100 or H200 (../shared/DESIGN.md, "Toolchain facts").
inline TargetCaps H100LikeCaps() {
  TargetCaps caps;
  caps.device_class = DeviceClass::kNvidia;
  caps.subgroup_size = caps.min_subgroup_size = 32;
  caps.max_shared_memory = 49152;
  caps.max_workgroup_invocations = 1024;
  caps.subgroup_arithmetic = caps.subgroup_shuffle = true;
  caps.coop_matrix_nv = caps.coop_matrix_nv_16x8 = caps.coop_fragments_mma = caps.coop_accumulators_mma = true;
  caps.integer_dot_product = caps.float16_arithmetic = caps.storage_16bit = true;
  return caps;
}

// Mesa's CPU driver (lavapipe) on x86 with AVX2.
inline TargetCaps LavapipeCaps() {
  TargetCaps caps;
  caps.device_class = DeviceClass::kLavapipe;
  caps.subgroup_size = caps.min_subgroup_size = 8;
  caps.max_shared_memory = 65536;
  caps.max_workgroup_invocations = 1024;
  caps.subgroup_arithmetic = caps.subgroup_shuffle = true;
  caps.integer_dot_product = caps.float16_arithmetic = true;
  return caps;
}

// An AMD RDNA GPU on RADV or AMDVLK, as their reports on vulkan.gpuinfo.org give it: subgroupSize
// 64, minSubgroupSize 32 (wave32 under subgroup size control), maxComputeSharedMemorySize 65536,
// maxComputeWorkGroupInvocations 1024, subgroup arithmetic and shuffles in compute,
// shaderIntegerDotProduct, shaderFloat16; no VK_NV_cooperative_matrix.
inline TargetCaps AmdLikeCaps() {
  TargetCaps caps;
  caps.device_class = DeviceClass::kAmd;
  caps.subgroup_size = 64;
  caps.min_subgroup_size = 32;
  caps.max_shared_memory = 65536;
  caps.max_workgroup_invocations = 1024;
  caps.subgroup_arithmetic = caps.subgroup_shuffle = true;
  caps.integer_dot_product = caps.float16_arithmetic = true;
  return caps;
}

// An Intel Arc GPU (Alchemist) on Mesa's ANV, as its reports on vulkan.gpuinfo.org give it:
// subgroupSize 32, minSubgroupSize 8 (the compiler picks 8, 16 or 32 a shader),
// maxComputeSharedMemorySize 65536, maxComputeWorkGroupInvocations 1024, subgroup arithmetic and
// shuffles in compute, shaderIntegerDotProduct, shaderFloat16; no VK_NV_cooperative_matrix.
inline TargetCaps IntelArcLikeCaps() {
  TargetCaps caps;
  caps.device_class = DeviceClass::kIntel;
  caps.subgroup_size = 32;
  caps.min_subgroup_size = 8;
  caps.max_shared_memory = 65536;
  caps.max_workgroup_invocations = 1024;
  caps.subgroup_arithmetic = caps.subgroup_shuffle = true;
  caps.integer_dot_product = caps.float16_arithmetic = true;
  return caps;
}

// A device that offers little beyond what Vulkan 1.2 requires of every implementation: the
// required maxComputeSharedMemorySize 16384, subgroupSize 1 (the least the specification allows;
// only the basic subgroup operations are required), no subgroup arithmetic or shuffles, no integer
// dot products (optional), no cooperative matrices; 256 workgroup invocations, not the required
// 128, since the tiled matmul's workgroups are 256 (codegen/matmul_gemm.cc).
inline TargetCaps GenericCaps() {
  TargetCaps caps;
  caps.device_class = DeviceClass::kGeneric;
  caps.subgroup_size = caps.min_subgroup_size = 1;
  caps.max_shared_memory = 16384;
  caps.max_workgroup_invocations = 256;
  caps.subgroup_arithmetic = caps.subgroup_shuffle = false;
  caps.integer_dot_product = false;
  return caps;
}

// The known target of a device class by its name (DeviceClassName: nvidia, amd, intel, lavapipe,
// generic), for `doppler graph --target`.
inline absl::StatusOr<TargetCaps> KnownTargetCaps(absl::string_view name) {
  for (const TargetCaps& caps : {H100LikeCaps(), AmdLikeCaps(), IntelArcLikeCaps(), LavapipeCaps(), GenericCaps()}) {
    if (name == DeviceClassName(caps.device_class)) return caps;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown target '", name, "' (known: nvidia, amd, intel, lavapipe, generic)"));
}

}  // namespace doppler::codegen
