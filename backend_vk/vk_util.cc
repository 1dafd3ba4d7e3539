#include "backend_vk/vk_util.h"

#include <string>

#include "absl/strings/str_format.h"

namespace doppler::vk {

std::string_view VkResultName(VkResult r) {
  switch (r) {
#define DOPPLER_CASE(x) \
  case x: return #x;
    DOPPLER_CASE(VK_SUCCESS)
    DOPPLER_CASE(VK_NOT_READY)
    DOPPLER_CASE(VK_TIMEOUT)
    DOPPLER_CASE(VK_EVENT_SET)
    DOPPLER_CASE(VK_EVENT_RESET)
    DOPPLER_CASE(VK_INCOMPLETE)
    DOPPLER_CASE(VK_ERROR_OUT_OF_HOST_MEMORY)
    DOPPLER_CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    DOPPLER_CASE(VK_ERROR_INITIALIZATION_FAILED)
    DOPPLER_CASE(VK_ERROR_DEVICE_LOST)
    DOPPLER_CASE(VK_ERROR_MEMORY_MAP_FAILED)
    DOPPLER_CASE(VK_ERROR_LAYER_NOT_PRESENT)
    DOPPLER_CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
    DOPPLER_CASE(VK_ERROR_FEATURE_NOT_PRESENT)
    DOPPLER_CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
    DOPPLER_CASE(VK_ERROR_TOO_MANY_OBJECTS)
    DOPPLER_CASE(VK_ERROR_FORMAT_NOT_SUPPORTED)
    DOPPLER_CASE(VK_ERROR_FRAGMENTED_POOL)
    DOPPLER_CASE(VK_ERROR_UNKNOWN)
    DOPPLER_CASE(VK_ERROR_OUT_OF_POOL_MEMORY)
    DOPPLER_CASE(VK_ERROR_INVALID_EXTERNAL_HANDLE)
    DOPPLER_CASE(VK_ERROR_FRAGMENTATION)
    DOPPLER_CASE(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
    DOPPLER_CASE(VK_PIPELINE_COMPILE_REQUIRED)
    DOPPLER_CASE(VK_ERROR_VALIDATION_FAILED_EXT)
#undef DOPPLER_CASE
    default: break;
  }
  // Per-thread storage for the rare unknown code: the view stays valid until this thread formats
  // the next unknown one, long enough for an error message built right away.
  thread_local std::string unknown;
  unknown = absl::StrFormat("VkResult(%d)", static_cast<int>(r));
  return unknown;
}

absl::Status VkFailure(std::string_view call, VkResult r, std::string_view context) {
  std::string msg = absl::StrFormat("%s failed: %s", call, VkResultName(r));
  if (!context.empty()) absl::StrAppendFormat(&msg, " (%s)", context);
  switch (r) {
    case VK_ERROR_OUT_OF_HOST_MEMORY:
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
    case VK_ERROR_OUT_OF_POOL_MEMORY:
    case VK_ERROR_FRAGMENTED_POOL:
    case VK_ERROR_FRAGMENTATION:
    case VK_ERROR_TOO_MANY_OBJECTS: return absl::ResourceExhaustedError(msg);
    case VK_ERROR_DEVICE_LOST: return absl::UnavailableError(msg);
    case VK_ERROR_LAYER_NOT_PRESENT:
    case VK_ERROR_EXTENSION_NOT_PRESENT:
    case VK_ERROR_FEATURE_NOT_PRESENT:
    case VK_ERROR_INCOMPATIBLE_DRIVER: return absl::FailedPreconditionError(msg);
    case VK_TIMEOUT: return absl::DeadlineExceededError(msg);
    default: return absl::InternalError(msg);
  }
}

void SetObjectName(VkDevice device, PFN_vkSetDebugUtilsObjectNameEXT fn, VkObjectType type,
                   uint64_t handle, std::string_view name) {
  if (fn == nullptr || handle == 0 || name.empty()) return;
  const std::string owned(name);  // the API wants a NUL-terminated string
  VkDebugUtilsObjectNameInfoEXT info{VK_STRUCTURE_TYPE_DEBUG_UTILS_OBJECT_NAME_INFO_EXT};
  info.objectType = type;
  info.objectHandle = handle;
  info.pObjectName = owned.c_str();
  fn(device, &info);  // only fails on host OOM; a missing name is harmless
}

}  // namespace doppler::vk
