// The Vulkan feature structs doppler cares about, queried and enabled through one pNext chain.
//
// Which structs may be chained depends on the effective API version (min of instance and device)
// and on the device's extensions; chaining an unknown struct is invalid usage, so the chain is
// built from flags rather than always linking everything.
#pragma once

#include <vulkan/vulkan.h>

#include <string>
#include <vector>

namespace doppler::vk {

struct FeatureChain {
  VkPhysicalDeviceFeatures2 core{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  VkPhysicalDeviceVulkan11Features v11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  VkPhysicalDeviceVulkan12Features v12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceVulkan13Features v13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
  // VK_EXT_subgroup_size_control on devices below 1.3 (same struct as the 1.3 promotion).
  VkPhysicalDeviceSubgroupSizeControlFeatures subgroup_size_ext{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
  VkPhysicalDeviceCooperativeMatrixFeaturesNV coop_nv{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  // VK_KHR_pipeline_executable_properties: the driver's statistics of a compiled pipeline
  // (registers, spills...) for profiles.
  VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR executable_info{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};

  bool use_v12 = false, use_v13 = false, use_subgroup_size_ext = false, use_coop_nv = false;
  bool use_executable_info = false;

  // Re-links pNext from the use_* flags; call after any copy, since the pointers are to members.
  VkPhysicalDeviceFeatures2* Link();

  bool subgroup_size_control() const;
  bool compute_full_subgroups() const;
  bool integer_dot_product() const;
};

// What the device supports, for the structs allowed at `effective_api_version` with `extensions`.
FeatureChain QueryFeatures(VkPhysicalDevice device, uint32_t effective_api_version,
                           const std::vector<std::string>& extensions);

// The subset of `supported` doppler turns on: fp16/int8/int64 arithmetic, 8/16-bit storage,
// subgroup size control, integer dot product, NV cooperative matrix. Everything else off.
FeatureChain WantedFeatures(const FeatureChain& supported);

// Device extension names.
std::vector<std::string> DeviceExtensions(VkPhysicalDevice device);
bool HasExtension(const std::vector<std::string>& extensions, const char* name);

}  // namespace doppler::vk
