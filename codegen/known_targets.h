// The capabilities of known devices, for what runs without one: the process-replay golden, tests
// of tuning choices and the compile benchmark.
#pragma once

#include "codegen/kernel.h"

namespace doppler::codegen {

// NVIDIA's Vulkan driver on an H100 or H200 (../shared/DESIGN.md, "Toolchain facts").
inline TargetCaps H100LikeCaps() {
  TargetCaps caps;
  caps.subgroup_size = caps.min_subgroup_size = 32;
  caps.max_shared_memory = 49152;
  caps.max_workgroup_invocations = 1024;
  caps.subgroup_arithmetic = caps.subgroup_shuffle = true;
  caps.coop_matrix_nv = true;
  caps.integer_dot_product = true;
  return caps;
}

// Mesa's CPU driver (lavapipe) on x86 with AVX2.
inline TargetCaps LavapipeCaps() {
  TargetCaps caps;
  caps.subgroup_size = caps.min_subgroup_size = 8;
  caps.max_shared_memory = 65536;
  caps.max_workgroup_invocations = 1024;
  caps.subgroup_arithmetic = caps.subgroup_shuffle = true;
  caps.integer_dot_product = true;
  return caps;
}

}  // namespace doppler::codegen
