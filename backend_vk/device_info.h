// What a physical device can do, probed once, so codegen and the scheduler choose kernel variants
// from facts (subgroup size, fp16, cooperative matrix, limits) instead of guessing.
#pragma once

#include <vulkan/vulkan.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/device_class.h"

namespace doppler::vk {

struct DeviceInfo {
  int index = -1;  // position in vkEnumeratePhysicalDevices order
  std::string name;
  std::string type;  // "discrete GPU", "integrated GPU", "virtual GPU", "CPU", "other"
  std::string driver_name, driver_info;
  uint32_t api_version = 0;  // the device's, VK_MAKE_API_VERSION-encoded
  uint32_t vendor_id = 0;
  VkDriverId driver_id{};  // 0 where the device reports no driver properties
  codegen::DeviceClass device_class = codegen::DeviceClass::kGeneric;  // DeviceClassOf(vendor_id, driver_id)

  uint32_t subgroup_size = 0;  // default size; min/max differ only with subgroup size control
  uint32_t min_subgroup_size = 0, max_subgroup_size = 0;
  bool subgroup_size_control = false;  // pipelines may require a subgroup size (in compute)
  bool full_subgroups = false;  // pipelines may require full subgroups (computeFullSubgroups)
  bool subgroup_arithmetic = false, subgroup_shuffle = false, subgroup_ballot = false;  // compute

  bool fp16 = false;             // shaderFloat16
  bool memory_model = false;     // vulkanMemoryModel (shaders that name memory scopes)
  bool int8 = false;             // shaderInt8
  bool int64 = false;            // shaderInt64
  bool storage16 = false;        // storageBuffer16BitAccess
  bool storage8 = false;         // storageBuffer8BitAccess
  bool int_dot_product = false;  // shaderIntegerDotProduct (Vulkan 1.3)
  bool coop_matrix_khr = false;  // VK_KHR_cooperative_matrix extension present
  bool coop_matrix_nv = false;   // VK_NV_cooperative_matrix extension present
  // Its subgroup-scope shapes with f16 A and B and f32 C and D, as "MxNxK" (what the driver lists)
  std::vector<std::string> coop_nv_f16_shapes;
  // Its f16 fragments keep their elements where NVIDIA's mma instructions do: checked by Context
  // on opening the device (backend_vk/coop_layout.h), false in a device list.
  bool coop_fragments_mma = false;
  // Its 16 × 16 f32 fragments do too (checked alike).
  bool coop_accumulators_mma = false;

  bool timestamps = false;        // the compute queue we pick supports timestamp queries
  float timestamp_period_ns = 0;  // ns per timestamp tick

  uint64_t max_storage_buffer_range = 0;
  uint32_t max_uniform_buffer_range = 0;
  uint64_t min_storage_buffer_offset_alignment = 0;
  uint64_t min_uniform_buffer_offset_alignment = 0;
  uint64_t max_memory_allocation_size = 0;
  uint32_t max_push_constant_bytes = 0;
  uint32_t max_shared_memory = 0;
  uint32_t max_workgroup_invocations = 0;
  std::array<uint32_t, 3> max_workgroup_size{};
  std::array<uint32_t, 3> max_workgroup_count{};
  uint64_t device_local_bytes = 0;  // sum of DEVICE_LOCAL heaps

  std::optional<uint32_t> compute_queue_family;  // what Context would use; nullopt: no compute
};

// The class of a device from its PCI vendor ID and its driver: Mesa's llvmpipe (lavapipe) first,
// whatever the vendor ID, then NVIDIA (0x10DE), AMD (0x1002) and Intel (0x8086) by vendor; any
// other device is generic.
codegen::DeviceClass DeviceClassOf(uint32_t vendor_id, VkDriverId driver_id);

// Lists every physical device. Creates and destroys its own instance (no validation).
absl::StatusOr<std::vector<DeviceInfo>> EnumerateDevices();

// Multi-line, human-readable description (`doppler devices`).
std::string FormatDeviceInfo(const DeviceInfo& info);

// "1.3.230".
std::string FormatVkVersion(uint32_t version);

// Used by Context: probes one device through an existing instance created for
// `instance_api_version`; features newer than min(instance, device) version are reported absent.
DeviceInfo ProbeDevice(VkInstance instance, VkPhysicalDevice device, int index, uint32_t instance_api_version);

// The queue family Context uses: one with COMPUTE, preferring one with timestamp support.
std::optional<uint32_t> PickComputeQueueFamily(VkPhysicalDevice device);

// Ranks device types for the default choice: discrete < integrated < virtual < CPU < other.
int DeviceTypeRank(VkPhysicalDeviceType type);

}  // namespace doppler::vk
