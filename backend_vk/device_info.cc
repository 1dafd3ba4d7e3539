#include "backend_vk/device_info.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "backend_vk/device_features.h"
#include "backend_vk/vk_util.h"

namespace doppler::vk {
namespace {

std::string TypeName(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "other";
  }
}

std::vector<VkQueueFamilyProperties> QueueFamilies(VkPhysicalDevice device) {
  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(device, &n, nullptr);
  std::vector<VkQueueFamilyProperties> families(n);
  vkGetPhysicalDeviceQueueFamilyProperties(device, &n, families.data());
  families.resize(n);
  return families;
}

std::string YesNo(bool b) { return b ? "yes" : "no"; }

std::string Bytes(uint64_t b) {
  if (b >= (1ull << 30)) return absl::StrFormat("%.1f GiB", b / double(1ull << 30));
  if (b >= (1ull << 20)) return absl::StrFormat("%.1f MiB", b / double(1ull << 20));
  if (b >= (1ull << 10)) return absl::StrFormat("%.1f KiB", b / double(1ull << 10));
  return absl::StrFormat("%d B", b);
}

}  // namespace

codegen::DeviceClass DeviceClassOf(uint32_t vendor_id, VkDriverId driver_id) {
  if (driver_id == VK_DRIVER_ID_MESA_LLVMPIPE) return codegen::DeviceClass::kLavapipe;
  switch (vendor_id) {
    case 0x10DE: return codegen::DeviceClass::kNvidia;
    case 0x1002: return codegen::DeviceClass::kAmd;
    case 0x8086: return codegen::DeviceClass::kIntel;
    default: return codegen::DeviceClass::kGeneric;
  }
}

int DeviceTypeRank(VkPhysicalDeviceType type) {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
  }
}

std::optional<uint32_t> PickComputeQueueFamily(VkPhysicalDevice device) {
  std::optional<uint32_t> any;
  const std::vector<VkQueueFamilyProperties> families = QueueFamilies(device);
  for (uint32_t i = 0; i < families.size(); ++i) {
    if (!(families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) || families[i].queueCount == 0) continue;
    if (families[i].timestampValidBits > 0) return i;
    if (!any) any = i;
  }
  return any;
}

std::string FormatVkVersion(uint32_t v) {
  return absl::StrFormat("%d.%d.%d", VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v),
                         VK_API_VERSION_PATCH(v));
}

// The cooperative-matrix shapes of f16 products summed in f32 that `device` lists, "MxNxK".
std::vector<std::string> CoopNvF16Shapes(VkInstance instance, VkPhysicalDevice device) {
  auto get = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV>(
      vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV"));
  std::vector<std::string> shapes;
  uint32_t n = 0;
  if (get == nullptr || get(device, &n, nullptr) != VK_SUCCESS) return shapes;
  std::vector<VkCooperativeMatrixPropertiesNV> props(n, {VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV});
  if (get(device, &n, props.data()) != VK_SUCCESS) return shapes;
  for (const VkCooperativeMatrixPropertiesNV& p : props) {
    if (p.scope == VK_SCOPE_SUBGROUP_NV && p.AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
        p.BType == VK_COMPONENT_TYPE_FLOAT16_NV && p.CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
        p.DType == VK_COMPONENT_TYPE_FLOAT32_NV) {
      shapes.push_back(absl::StrFormat("%dx%dx%d", p.MSize, p.NSize, p.KSize));
    }
  }
  return shapes;
}

DeviceInfo ProbeDevice(VkInstance instance, VkPhysicalDevice device, int index, uint32_t instance_api_version) {
  VkPhysicalDeviceProperties base;
  vkGetPhysicalDeviceProperties(device, &base);
  const uint32_t effective = std::min(base.apiVersion, instance_api_version);
  const std::vector<std::string> exts = DeviceExtensions(device);

  // Properties chain; the structs below are core in 1.1 except where gated.
  VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  VkPhysicalDeviceSubgroupProperties subgroup{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceMaintenance3Properties maint3{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
  VkPhysicalDeviceDriverProperties driver{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  VkPhysicalDeviceSubgroupSizeControlProperties sgsc{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES};
  props.pNext = &subgroup;
  subgroup.pNext = &maint3;
  void** tail = &maint3.pNext;
  const bool has_driver = effective >= VK_API_VERSION_1_2 ||
                          HasExtension(exts, VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME);
  const bool has_sgsc = effective >= VK_API_VERSION_1_3 ||
                        HasExtension(exts, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
  if (has_driver) {
    *tail = &driver;
    tail = &driver.pNext;
  }
  if (has_sgsc) {
    *tail = &sgsc;
    tail = &sgsc.pNext;
  }
  vkGetPhysicalDeviceProperties2(device, &props);
  const VkPhysicalDeviceLimits& lim = props.properties.limits;

  FeatureChain features = QueryFeatures(device, effective, exts);

  DeviceInfo info;
  info.index = index;
  info.name = props.properties.deviceName;
  info.type = TypeName(props.properties.deviceType);
  if (has_driver) {
    info.driver_name = driver.driverName;
    info.driver_info = driver.driverInfo;
    info.driver_id = driver.driverID;
  }
  info.api_version = props.properties.apiVersion;
  info.vendor_id = props.properties.vendorID;
  info.device_class = DeviceClassOf(info.vendor_id, info.driver_id);

  info.subgroup_size = subgroup.subgroupSize;
  info.min_subgroup_size = has_sgsc ? sgsc.minSubgroupSize : subgroup.subgroupSize;
  info.max_subgroup_size = has_sgsc ? sgsc.maxSubgroupSize : subgroup.subgroupSize;
  info.subgroup_size_control = features.subgroup_size_control() && has_sgsc &&
                               (sgsc.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT);
  info.full_subgroups = features.compute_full_subgroups();
  const bool compute_ops = subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT;
  info.subgroup_arithmetic =
      compute_ops && (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
  info.subgroup_shuffle =
      compute_ops && (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
  info.subgroup_ballot =
      compute_ops && (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_BALLOT_BIT);

  info.int64 = features.core.features.shaderInt64;
  if (features.use_v12) {
    info.fp16 = features.v12.shaderFloat16;
    info.memory_model = features.v12.vulkanMemoryModel;
    info.int8 = features.v12.shaderInt8;
    info.storage16 = features.v11.storageBuffer16BitAccess;
    info.storage8 = features.v12.storageBuffer8BitAccess;
  }
  info.int_dot_product = features.integer_dot_product();
  info.coop_matrix_khr = HasExtension(exts, "VK_KHR_cooperative_matrix");
  // The extension with its feature: what Context enables.
  info.coop_matrix_nv = features.use_coop_nv && features.coop_nv.cooperativeMatrix;
  if (info.coop_matrix_nv) info.coop_nv_f16_shapes = CoopNvF16Shapes(instance, device);

  info.compute_queue_family = PickComputeQueueFamily(device);
  if (info.compute_queue_family) {
    const auto families = QueueFamilies(device);
    info.timestamps =
        families[*info.compute_queue_family].timestampValidBits > 0 && lim.timestampPeriod > 0;
  }
  info.timestamp_period_ns = lim.timestampPeriod;

  info.max_storage_buffer_range = lim.maxStorageBufferRange;
  info.max_uniform_buffer_range = lim.maxUniformBufferRange;
  info.min_storage_buffer_offset_alignment = lim.minStorageBufferOffsetAlignment;
  info.min_uniform_buffer_offset_alignment = lim.minUniformBufferOffsetAlignment;
  info.max_memory_allocation_size = maint3.maxMemoryAllocationSize;
  info.max_push_constant_bytes = lim.maxPushConstantsSize;
  info.max_shared_memory = lim.maxComputeSharedMemorySize;
  info.max_workgroup_invocations = lim.maxComputeWorkGroupInvocations;
  for (int i = 0; i < 3; ++i) {
    info.max_workgroup_size[i] = lim.maxComputeWorkGroupSize[i];
    info.max_workgroup_count[i] = lim.maxComputeWorkGroupCount[i];
  }

  VkPhysicalDeviceMemoryProperties mem;
  vkGetPhysicalDeviceMemoryProperties(device, &mem);
  for (uint32_t i = 0; i < mem.memoryHeapCount; ++i) {
    if (mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) {
      info.device_local_bytes += mem.memoryHeaps[i].size;
    }
  }
  return info;
}

absl::StatusOr<std::vector<DeviceInfo>> EnumerateDevices() {
  uint32_t loader_version = VK_API_VERSION_1_0;
  // vkEnumerateInstanceVersion is missing from 1.0 loaders; through the proc address it is safe.
  auto enumerate_version = reinterpret_cast<PFN_vkEnumerateInstanceVersion>(
      vkGetInstanceProcAddr(nullptr, "vkEnumerateInstanceVersion"));
  if (enumerate_version != nullptr) enumerate_version(&loader_version);
  const uint32_t api = std::min<uint32_t>(loader_version, VK_API_VERSION_1_3);

  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "doppler";
  app.pEngineName = "doppler";
  app.apiVersion = api;
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.pApplicationInfo = &app;
  VkInstance instance = VK_NULL_HANDLE;
  DOPPLER_VK_CHECK(vkCreateInstance(&ci, nullptr, &instance));

  std::vector<DeviceInfo> out;
  uint32_t n = 0;
  VkResult r = vkEnumeratePhysicalDevices(instance, &n, nullptr);
  std::vector<VkPhysicalDevice> devices(n);
  if (r == VK_SUCCESS) r = vkEnumeratePhysicalDevices(instance, &n, devices.data());
  if (r == VK_SUCCESS || r == VK_INCOMPLETE) {
    devices.resize(n);
    for (uint32_t i = 0; i < devices.size(); ++i) {
      out.push_back(ProbeDevice(instance, devices[i], static_cast<int>(i), api));
    }
  }
  vkDestroyInstance(instance, nullptr);
  if (r != VK_SUCCESS && r != VK_INCOMPLETE) return VkFailure("vkEnumeratePhysicalDevices", r);
  return out;
}

std::string FormatDeviceInfo(const DeviceInfo& d) {
  std::string s;
  absl::StrAppendFormat(&s, "[%d] %s (%s)\n", d.index, d.name, d.type);
  absl::StrAppendFormat(&s, "  driver:            %s %s\n", d.driver_name, d.driver_info);
  absl::StrAppendFormat(&s, "  Vulkan:            %s, vendor 0x%04x, driver ID %d\n",
                        FormatVkVersion(d.api_version), d.vendor_id, static_cast<int>(d.driver_id));
  absl::StrAppendFormat(&s, "  device class:      %s\n",
                        codegen::DeviceClassName(d.device_class));
  absl::StrAppendFormat(&s, "  device memory:     %s\n", Bytes(d.device_local_bytes));
  absl::StrAppendFormat(&s,
                        "  subgroup:          size %d (min %d, max %d, control %s); "
                        "arithmetic %s, shuffle %s, ballot %s\n",
                        d.subgroup_size, d.min_subgroup_size, d.max_subgroup_size,
                        YesNo(d.subgroup_size_control), YesNo(d.subgroup_arithmetic),
                        YesNo(d.subgroup_shuffle), YesNo(d.subgroup_ballot));
  absl::StrAppendFormat(&s, "  arithmetic:        fp16 %s, int8 %s, int64 %s, int dot %s\n",
                        YesNo(d.fp16), YesNo(d.int8), YesNo(d.int64), YesNo(d.int_dot_product));
  absl::StrAppendFormat(&s, "  storage:           16-bit %s, 8-bit %s\n", YesNo(d.storage16),
                        YesNo(d.storage8));
  absl::StrAppendFormat(&s, "  coop matrix:       KHR %s, NV %s%s\n", YesNo(d.coop_matrix_khr), YesNo(d.coop_matrix_nv),
                        d.coop_nv_f16_shapes.empty()
                            ? ""
                            : absl::StrCat(" (f16 products in f32: ", absl::StrJoin(d.coop_nv_f16_shapes, ", "), ")"));
  absl::StrAppendFormat(&s, "  timestamps:        %s (%.3f ns/tick)\n", YesNo(d.timestamps),
                        d.timestamp_period_ns);
  absl::StrAppendFormat(&s, "  storage buffer:    max range %s, offset align %d\n",
                        Bytes(d.max_storage_buffer_range), d.min_storage_buffer_offset_alignment);
  absl::StrAppendFormat(&s, "  max allocation:    %s\n", Bytes(d.max_memory_allocation_size));
  absl::StrAppendFormat(&s,
                        "  workgroup:         %d invocations, size %dx%dx%d, "
                        "count %dx%dx%d, %s shared\n",
                        d.max_workgroup_invocations, d.max_workgroup_size[0],
                        d.max_workgroup_size[1], d.max_workgroup_size[2], d.max_workgroup_count[0],
                        d.max_workgroup_count[1], d.max_workgroup_count[2],
                        Bytes(d.max_shared_memory));
  absl::StrAppendFormat(&s, "  push constants:    %d bytes\n", d.max_push_constant_bytes);
  if (d.compute_queue_family) {
    absl::StrAppendFormat(&s, "  compute queue:     family %d\n", *d.compute_queue_family);
  } else {
    absl::StrAppendFormat(&s, "  compute queue:     none (unusable)\n");
  }
  return s;
}

}  // namespace doppler::vk
