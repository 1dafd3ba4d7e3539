// Small helpers every backend file needs: VkResult -> absl::Status, and debug object names.
#pragma once

#include <vulkan/vulkan.h>

#include <string_view>

#include "absl/status/status.h"

namespace doppler::vk {

// "VK_ERROR_DEVICE_LOST" etc.; "VkResult(<n>)" for codes this header version does not know.
std::string_view VkResultName(VkResult r);

// The Status for a failed Vulkan call, naming the call and the result:
// "vkAllocateMemory failed: VK_ERROR_OUT_OF_DEVICE_MEMORY (buffer 'kv_cache', 268435456 bytes)".
// Out-of-memory results map to ResourceExhausted, device loss to Unavailable, the rest to Internal.
absl::Status VkFailure(std::string_view call, VkResult r, std::string_view context = {});

// Returns from the enclosing function when a Vulkan call does not return VK_SUCCESS.
#define DOPPLER_VK_CHECK(call_expr)                                    \
  do {                                                                 \
    const VkResult doppler_vk_result_ = (call_expr);                   \
    if (doppler_vk_result_ != VK_SUCCESS) {                            \
      return ::doppler::vk::VkFailure(#call_expr, doppler_vk_result_); \
    }                                                                  \
  } while (0)

// Sets a VK_EXT_debug_utils object name (shows up in validation messages and in RenderDoc/Nsight).
// A no-op when the extension is not enabled (fn == nullptr).
void SetObjectName(VkDevice device, PFN_vkSetDebugUtilsObjectNameEXT fn, VkObjectType type,
                   uint64_t handle, std::string_view name);

// Rounds `v` up to a multiple of `align` (any non-zero value, not only powers of two).
inline uint64_t AlignUp(uint64_t v, uint64_t align) { return (v + align - 1) / align * align; }

}  // namespace doppler::vk
