#include "backend_vk/device_features.h"

#include <algorithm>

namespace doppler::vk {

VkPhysicalDeviceFeatures2* FeatureChain::Link() {
  void* next = nullptr;
  auto push = [&next](auto& s) {
    s.pNext = next;
    next = &s;
  };
  if (use_coop_nv) push(coop_nv);
  if (use_executable_info) push(executable_info);
  if (use_subgroup_size_ext) push(subgroup_size_ext);
  if (use_v13) push(v13);
  if (use_v12) {
    push(v12);
    push(v11);  // Vulkan11Features is only valid from 1.2 on as well
  }
  core.pNext = next;
  return &core;
}

bool FeatureChain::subgroup_size_control() const {
  return (use_v13 && v13.subgroupSizeControl) ||
         (use_subgroup_size_ext && subgroup_size_ext.subgroupSizeControl);
}

bool FeatureChain::compute_full_subgroups() const {
  return (use_v13 && v13.computeFullSubgroups) ||
         (use_subgroup_size_ext && subgroup_size_ext.computeFullSubgroups);
}

bool FeatureChain::integer_dot_product() const { return use_v13 && v13.shaderIntegerDotProduct; }

std::vector<std::string> DeviceExtensions(VkPhysicalDevice device) {
  uint32_t n = 0;
  std::vector<VkExtensionProperties> props;
  // VK_INCOMPLETE can only happen if the list changes between the two calls; retry then.
  VkResult r;
  do {
    if (vkEnumerateDeviceExtensionProperties(device, nullptr, &n, nullptr) != VK_SUCCESS) return {};
    props.resize(n);
    r = vkEnumerateDeviceExtensionProperties(device, nullptr, &n, props.data());
  } while (r == VK_INCOMPLETE);
  std::vector<std::string> names;
  if (r != VK_SUCCESS) return names;
  for (uint32_t i = 0; i < n; ++i) names.emplace_back(props[i].extensionName);
  return names;
}

bool HasExtension(const std::vector<std::string>& extensions, const char* name) {
  return std::find(extensions.begin(), extensions.end(), name) != extensions.end();
}

FeatureChain QueryFeatures(VkPhysicalDevice device, uint32_t effective_api_version,
                           const std::vector<std::string>& extensions) {
  FeatureChain f;
  f.use_v12 = effective_api_version >= VK_API_VERSION_1_2;
  f.use_v13 = effective_api_version >= VK_API_VERSION_1_3;
  f.use_subgroup_size_ext =
      !f.use_v13 && HasExtension(extensions, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
  f.use_coop_nv = HasExtension(extensions, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  f.use_executable_info = HasExtension(extensions, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
  vkGetPhysicalDeviceFeatures2(device, f.Link());
  return f;
}

FeatureChain WantedFeatures(const FeatureChain& s) {
  FeatureChain w;
  w.use_v12 = s.use_v12;
  w.use_v13 = s.use_v13;
  w.use_subgroup_size_ext = s.use_subgroup_size_ext;
  w.use_coop_nv = s.use_coop_nv && s.coop_nv.cooperativeMatrix;
  w.use_executable_info = s.use_executable_info && s.executable_info.pipelineExecutableInfo;

  w.core.features.shaderInt64 = s.core.features.shaderInt64;
  w.core.features.shaderInt16 = s.core.features.shaderInt16;
  if (w.use_v12) {
    w.v11.storageBuffer16BitAccess = s.v11.storageBuffer16BitAccess;
    w.v11.uniformAndStorageBuffer16BitAccess = s.v11.uniformAndStorageBuffer16BitAccess;
    w.v12.shaderFloat16 = s.v12.shaderFloat16;
    w.v12.shaderInt8 = s.v12.shaderInt8;
    w.v12.storageBuffer8BitAccess = s.v12.storageBuffer8BitAccess;
    w.v12.uniformAndStorageBuffer8BitAccess = s.v12.uniformAndStorageBuffer8BitAccess;
    // Lets timestamp pools be reset from the host, outside any command buffer.
    w.v12.hostQueryReset = s.v12.hostQueryReset;
    // The cooperative-matrix kernels name memory scopes (GL_KHR_memory_scope_semantics); kernels
    // whose workgroups hand results to each other (a fused argmax) use device-scope atomics and
    // barriers, which the memory model then needs its device scope for.
    w.v12.vulkanMemoryModel = s.v12.vulkanMemoryModel;
    w.v12.vulkanMemoryModelDeviceScope = s.v12.vulkanMemoryModelDeviceScope;
  }
  if (w.use_v13) {
    w.v13.subgroupSizeControl = s.v13.subgroupSizeControl;
    w.v13.computeFullSubgroups = s.v13.computeFullSubgroups;
    w.v13.shaderIntegerDotProduct = s.v13.shaderIntegerDotProduct;
  }
  if (w.use_subgroup_size_ext) {
    w.subgroup_size_ext.subgroupSizeControl = s.subgroup_size_ext.subgroupSizeControl;
    w.subgroup_size_ext.computeFullSubgroups = s.subgroup_size_ext.computeFullSubgroups;
  }
  if (w.use_coop_nv) w.coop_nv.cooperativeMatrix = VK_TRUE;
  if (w.use_executable_info) w.executable_info.pipelineExecutableInfo = VK_TRUE;
  return w;
}

}  // namespace doppler::vk
