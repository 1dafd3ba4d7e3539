// The kind of device a kernel is generated for: the measurements behind the tuning choices
// (codegen/tuning/) were taken on one kind of device, and a choice says which one it stands on.
#pragma once

namespace doppler::codegen {

enum class DeviceClass {
  kNvidia,    // NVIDIA's driver: subgroups of 32 (the H100 and H200 of bench/RESULTS.md)
  kAmd,       // AMD's drivers: subgroups of 64 (wave32 where subgroup size control allows it)
  kIntel,     // Intel's driver: subgroup sizes 8 to 32, chosen by the compiler
  kLavapipe,  // Mesa's CPU driver, where the tests run
  kGeneric,   // any other device: the Vulkan 1.2 limits the engine needs, nothing assumed
};

// "nvidia", "amd", "intel", "lavapipe" or "generic".
const char* DeviceClassName(DeviceClass c);

}  // namespace doppler::codegen
