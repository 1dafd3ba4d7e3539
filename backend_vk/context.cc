// Context lifecycle: instance (+ validation), device choice, logical device, queue, and the one
// submit-and-wait path. Buffers/transfers live in transfer.cc, pipelines in pipeline.cc, command
// recording in command.cc.
#include "backend_vk/context.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_format.h"
#include "backend_vk/coop_layout.h"
#include "backend_vk/device_features.h"
#include "backend_vk/plan.h"
#include "backend_vk/vk_util.h"

namespace doppler::vk {
namespace {

constexpr const char* kValidationLayer = "VK_LAYER_KHRONOS_validation";

std::vector<std::string> InstanceExtensions(const char* layer) {
  uint32_t n = 0;
  if (vkEnumerateInstanceExtensionProperties(layer, &n, nullptr) != VK_SUCCESS) return {};
  std::vector<VkExtensionProperties> props(n);
  if (vkEnumerateInstanceExtensionProperties(layer, &n, props.data()) != VK_SUCCESS) return {};
  std::vector<std::string> names;
  for (uint32_t i = 0; i < n; ++i) names.emplace_back(props[i].extensionName);
  return names;
}

bool HasLayer(const char* name) {
  uint32_t n = 0;
  if (vkEnumerateInstanceLayerProperties(&n, nullptr) != VK_SUCCESS) return false;
  std::vector<VkLayerProperties> props(n);
  if (vkEnumerateInstanceLayerProperties(&n, props.data()) != VK_SUCCESS) return false;
  for (uint32_t i = 0; i < n; ++i) {
    if (std::strcmp(props[i].layerName, name) == 0) return true;
  }
  return false;
}

std::string DeviceList(const std::vector<DeviceInfo>& devices) {
  std::string s;
  for (const DeviceInfo& d : devices) {
    absl::StrAppendFormat(&s, "\n  [%d] %s (%s, Vulkan %s)", d.index, d.name, d.type,
                          FormatVkVersion(d.api_version));
  }
  return s.empty() ? std::string("\n  (none)") : s;
}

// Why a device cannot host a Context, or "" when it can.
std::string Unusable(const DeviceInfo& d) {
  if (!d.compute_queue_family) return "it has no compute queue";
  if (d.api_version < VK_API_VERSION_1_2) {
    return absl::StrFormat("it supports Vulkan %s and doppler needs 1.2",
                           FormatVkVersion(d.api_version));
  }
  return "";
}

}  // namespace

VKAPI_ATTR VkBool32 VKAPI_CALL Context::DebugCallback(
    VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT types,
    const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
  // The messenger is created for WARNING and ERROR only, so every call counts.
  auto* self = static_cast<Context*>(user);
  self->validation_messages_.fetch_add(1);
  const char* level =
      (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) ? "ERROR" : "WARNING";
  std::fprintf(stderr, "[vulkan %s] %s\n", level,
               data != nullptr && data->pMessage != nullptr ? data->pMessage : "(no message)");
  return VK_FALSE;  // never abort the call that triggered it
}

absl::StatusOr<std::unique_ptr<Context>> Context::Create(const ContextOptions& options) {
  std::unique_ptr<Context> ctx(new Context());
  if (absl::Status s = ctx->Init(options); !s.ok()) return s;
  return ctx;
}

absl::Status Context::Init(const ContextOptions& options) {
  bool sync = options.sync_validation;
  validation_ = options.validation || sync;
  if (const char* env = std::getenv("DOPPLER_VALIDATION")) {
    if (std::strcmp(env, "sync") == 0) sync = true;
    if (env[0] != '\0' && std::strcmp(env, "0") != 0) validation_ = true;
  }
  submit_timeout_ = options.submit_timeout;
  if (absl::Status s = CreateInstance(sync); !s.ok()) return s;
  if (absl::Status s = PickDevice(options); !s.ok()) return s;
  if (absl::Status s = CreateDevice(); !s.ok()) return s;
  // Kernels that fill fragments element by element run only where the driver's element order is
  // the one they assume; a check that cannot run leaves them off (they have staged twins).
  if (const codegen::TargetCaps caps = TargetCapsOf(info_); caps.coop_matrix_nv) {
    absl::StatusOr<bool> mma = CheckCoopFragmentLayout(*this, caps.coop_matrix_nv_16x8);
    info_.coop_fragments_mma = mma.ok() && *mma;
    absl::StatusOr<bool> sums = CheckCoopAccumulatorLayout(*this);
    info_.coop_accumulators_mma = sums.ok() && *sums;
  }
  return absl::OkStatus();
}

absl::Status Context::CreateInstance(bool sync_validation) {
  uint32_t loader_version = VK_API_VERSION_1_0;
  auto enumerate_version = reinterpret_cast<PFN_vkEnumerateInstanceVersion>(
      vkGetInstanceProcAddr(nullptr, "vkEnumerateInstanceVersion"));
  if (enumerate_version != nullptr) enumerate_version(&loader_version);
  if (loader_version < VK_API_VERSION_1_2) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the Vulkan loader supports %s; doppler needs 1.2", FormatVkVersion(loader_version)));
  }
  // 1.3 is the newest version these headers know the feature structs of.
  instance_api_ = std::min<uint32_t>(loader_version, VK_API_VERSION_1_3);

  std::vector<const char*> layers, extensions;
  const std::vector<std::string> loader_exts = InstanceExtensions(nullptr);
  std::vector<std::string> layer_exts;
  if (validation_) {
    if (!HasLayer(kValidationLayer)) {
      return absl::FailedPreconditionError(
          "validation was requested (ContextOptions::validation or DOPPLER_VALIDATION) but the "
          "VK_LAYER_KHRONOS_validation layer is not installed (Debian/Ubuntu: "
          "apt install vulkan-validationlayers)");
    }
    layers.push_back(kValidationLayer);
    layer_exts = InstanceExtensions(kValidationLayer);
  }
  debug_utils_ = HasExtension(loader_exts, VK_EXT_DEBUG_UTILS_EXTENSION_NAME) ||
                 HasExtension(layer_exts, VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
  if (validation_ && !debug_utils_) {
    return absl::FailedPreconditionError(
        "validation needs VK_EXT_debug_utils to count messages, and this loader lacks it");
  }
  if (debug_utils_) extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
  if (sync_validation) {
    if (!HasExtension(layer_exts, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME)) {
      return absl::FailedPreconditionError(
          "synchronization validation needs VK_EXT_validation_features from the validation layer");
    }
    extensions.push_back(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
  }

  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "doppler";
  app.pEngineName = "doppler";
  app.apiVersion = instance_api_;

  // The same messenger settings go into the instance's pNext, so messages emitted while the
  // instance itself is created or destroyed are counted too.
  VkDebugUtilsMessengerCreateInfoEXT messenger_ci{
      VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
  messenger_ci.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                                 VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  messenger_ci.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                             VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                             VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  messenger_ci.pfnUserCallback = &Context::DebugCallback;
  messenger_ci.pUserData = this;
  VkValidationFeatureEnableEXT sync_feature =
      VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
  VkValidationFeaturesEXT features{VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT};
  features.enabledValidationFeatureCount = 1;
  features.pEnabledValidationFeatures = &sync_feature;
  if (sync_validation) messenger_ci.pNext = &features;

  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.pApplicationInfo = &app;
  ci.enabledLayerCount = static_cast<uint32_t>(layers.size());
  ci.ppEnabledLayerNames = layers.data();
  ci.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  ci.ppEnabledExtensionNames = extensions.data();
  if (validation_) ci.pNext = &messenger_ci;
  DOPPLER_VK_CHECK(vkCreateInstance(&ci, nullptr, &instance_));

  if (debug_utils_) {
    set_name_ = reinterpret_cast<PFN_vkSetDebugUtilsObjectNameEXT>(
        vkGetInstanceProcAddr(instance_, "vkSetDebugUtilsObjectNameEXT"));
  }
  if (validation_) {
    auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance_, "vkCreateDebugUtilsMessengerEXT"));
    if (create == nullptr) {
      return absl::InternalError("vkCreateDebugUtilsMessengerEXT is missing despite debug utils");
    }
    messenger_ci.pNext = nullptr;
    DOPPLER_VK_CHECK(create(instance_, &messenger_ci, nullptr, &messenger_));
  }
  return absl::OkStatus();
}

absl::Status Context::PickDevice(const ContextOptions& options) {
  uint32_t n = 0;
  DOPPLER_VK_CHECK(vkEnumeratePhysicalDevices(instance_, &n, nullptr));
  std::vector<VkPhysicalDevice> handles(n);
  DOPPLER_VK_CHECK(vkEnumeratePhysicalDevices(instance_, &n, handles.data()));
  std::vector<DeviceInfo> devices;
  std::vector<VkPhysicalDeviceType> types;
  for (uint32_t i = 0; i < n; ++i) {
    devices.push_back(ProbeDevice(instance_, handles[i], static_cast<int>(i), instance_api_));
    VkPhysicalDeviceProperties p;
    vkGetPhysicalDeviceProperties(handles[i], &p);
    types.push_back(p.deviceType);
  }
  if (devices.empty()) {
    return absl::NotFoundError(
        "no Vulkan device found (for the CPU driver on Debian/Ubuntu: apt install "
        "mesa-vulkan-drivers)");
  }

  std::optional<int> chosen;
  if (options.device_index) {
    const int i = *options.device_index;
    if (i < 0 || i >= static_cast<int>(devices.size())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("device index %d is out of range; devices:%s", i, DeviceList(devices)));
    }
    chosen = i;
  } else if (options.device_name) {
    for (const DeviceInfo& d : devices) {
      if (d.name.find(*options.device_name) != std::string::npos) {
        chosen = d.index;
        break;
      }
    }
    if (!chosen) {
      return absl::NotFoundError(absl::StrFormat("no device name contains '%s'; devices:%s",
                                                 *options.device_name, DeviceList(devices)));
    }
  } else {
    for (const DeviceInfo& d : devices) {
      if (!Unusable(d).empty()) continue;
      if (!chosen || DeviceTypeRank(types[d.index]) < DeviceTypeRank(types[*chosen])) {
        chosen = d.index;
      }
    }
    if (!chosen) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "no usable Vulkan device (needs Vulkan 1.2 and a compute queue); devices:%s",
          DeviceList(devices)));
    }
  }
  if (std::string why = Unusable(devices[*chosen]); !why.empty()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("device [%d] %s cannot be used: %s", *chosen, devices[*chosen].name, why));
  }
  physical_ = handles[*chosen];
  info_ = devices[*chosen];
  queue_family_ = *info_.compute_queue_family;
  return absl::OkStatus();
}

absl::Status Context::CreateDevice() {
  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(physical_, &props);
  const uint32_t effective = std::min(props.apiVersion, instance_api_);
  const std::vector<std::string> exts = DeviceExtensions(physical_);
  FeatureChain wanted = WantedFeatures(QueryFeatures(physical_, effective, exts));

  std::vector<const char*> enabled;
  if (wanted.use_subgroup_size_ext) enabled.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
  if (wanted.use_coop_nv) enabled.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  if (wanted.use_executable_info) {
    enabled.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
    pipeline_statistics_ = true;
  }

  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = queue_family_;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.pNext = wanted.Link();
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  dci.enabledExtensionCount = static_cast<uint32_t>(enabled.size());
  dci.ppEnabledExtensionNames = enabled.data();
  DOPPLER_VK_CHECK(vkCreateDevice(physical_, &dci, nullptr, &device_));
  vkGetDeviceQueue(device_, queue_family_, 0, &queue_);
  SetDebugName(VK_OBJECT_TYPE_DEVICE, reinterpret_cast<uint64_t>(device_), "doppler device");
  SetDebugName(VK_OBJECT_TYPE_QUEUE, reinterpret_cast<uint64_t>(queue_), "doppler compute queue");

  VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  DOPPLER_VK_CHECK(vkCreateFence(device_, &fci, nullptr, &fence_));

  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = queue_family_;
  DOPPLER_VK_CHECK(vkCreateCommandPool(device_, &pci, nullptr, &transfer_pool_));
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = transfer_pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  DOPPLER_VK_CHECK(vkAllocateCommandBuffers(device_, &ai, &transfer_cmd_));
  SetDebugName(VK_OBJECT_TYPE_COMMAND_BUFFER, reinterpret_cast<uint64_t>(transfer_cmd_),
               "doppler transfers");

  allocator_ = std::make_unique<MemoryAllocator>(device_, physical_, info_, set_name_);
  absl::StatusOr<std::unique_ptr<DescriptorAllocator>> d = CreateDescriptorAllocator();
  if (!d.ok()) return d.status();
  descriptors_ = std::move(*d);
  return absl::OkStatus();
}

Context::~Context() {
  if (device_ != VK_NULL_HANDLE) {
    vkDeviceWaitIdle(device_);  // a timed-out submit may still run; nothing is freed under it
    staging_.reset();
    descriptors_.reset();
    allocator_.reset();
    if (transfer_pool_ != VK_NULL_HANDLE) vkDestroyCommandPool(device_, transfer_pool_, nullptr);
    if (fence_ != VK_NULL_HANDLE) vkDestroyFence(device_, fence_, nullptr);
    vkDestroyDevice(device_, nullptr);
  }
  if (messenger_ != VK_NULL_HANDLE) {
    auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance_, "vkDestroyDebugUtilsMessengerEXT"));
    if (destroy != nullptr) destroy(instance_, messenger_, nullptr);
  }
  if (instance_ != VK_NULL_HANDLE) vkDestroyInstance(instance_, nullptr);
}

void Context::SetDebugName(VkObjectType type, uint64_t handle, std::string_view name) const {
  SetObjectName(device_, set_name_, type, handle, name);
}

absl::Status Context::SubmitAndWait(VkCommandBuffer cmd, std::string_view what) {
  if (absl::Status s = SubmitWithFence(cmd, fence_, what); !s.ok()) return s;
  return WaitForFence(fence_, what);
}

absl::Status Context::SubmitWithFence(VkCommandBuffer cmd, VkFence fence, std::string_view what) {
  if (!lost_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot submit %s: the device is unusable after an earlier failure: %s",
                        what, lost_.message()));
  }
  DOPPLER_VK_CHECK(vkResetFences(device_, 1, &fence));
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cmd;
  if (VkResult r = vkQueueSubmit(queue_, 1, &si, fence); r != VK_SUCCESS) {
    absl::Status s = VkFailure("vkQueueSubmit", r, what);
    if (r == VK_ERROR_DEVICE_LOST) lost_ = s;
    return s;
  }
  ++submit_count_;
  return absl::OkStatus();
}

absl::Status Context::WaitForFence(VkFence fence, std::string_view what) {
  const uint64_t timeout_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(submit_timeout_).count();
  const VkResult r = vkWaitForFences(device_, 1, &fence, VK_TRUE, timeout_ns);
  if (r == VK_TIMEOUT) {
    // The work may still be running: the command buffer stays pending and must not be touched,
    // so the Context refuses further work instead of risking a crash.
    lost_ = absl::DeadlineExceededError(absl::StrFormat(
        "%s did not finish within %d ms", what, static_cast<long long>(submit_timeout_.count())));
    return lost_;
  }
  if (r != VK_SUCCESS) {
    lost_ = VkFailure("vkWaitForFences", r, what);
    return lost_;
  }
  return absl::OkStatus();
}

}  // namespace doppler::vk
