// Compute pipelines built from reflected shaders, and descriptor sets for them.
//
// Every pipeline uses descriptor set 0 only, holding the storage/uniform buffers the shader
// declares, plus one push-constant range when the shader has a push-constant block. Descriptor
// sets are written once when a plan is built and reused by every replay; they are never allocated
// per token.
#pragma once

#include <vulkan/vulkan.h>

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "backend_vk/buffer.h"
#include "codegen/shader_compiler.h"

namespace doppler::vk {

struct PipelineOptions {
  // Force this subgroup size (needs DeviceInfo::subgroup_size_control and a size in
  // [min_subgroup_size, max_subgroup_size]); 0 keeps the driver's choice.
  uint32_t required_subgroup_size = 0;
  // Require full subgroups in every workgroup (local_size.x must be a multiple of the size).
  bool full_subgroups = false;
};

class ComputePipeline {
 public:
  ~ComputePipeline();
  ComputePipeline(const ComputePipeline&) = delete;
  ComputePipeline& operator=(const ComputePipeline&) = delete;

  VkPipeline handle() const { return pipeline_; }
  VkPipelineLayout layout() const { return layout_; }
  VkDescriptorSetLayout set_layout() const { return set_layout_; }
  const std::string& name() const { return name_; }
  const std::vector<codegen::BindingInfo>& bindings() const { return bindings_; }
  uint32_t push_constant_bytes() const { return push_constant_bytes_; }
  const std::array<uint32_t, 3>& local_size() const { return local_size_; }
  // What the driver reports about the compiled code (e.g. "Register Count" = "40"), where it
  // supports VK_KHR_pipeline_executable_properties; empty otherwise.
  const std::vector<std::pair<std::string, std::string>>& statistics() const { return statistics_; }

 private:
  friend class Context;
  ComputePipeline() = default;

  VkDevice device_ = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkPipeline pipeline_ = VK_NULL_HANDLE;
  std::string name_;
  std::vector<codegen::BindingInfo> bindings_;
  uint32_t push_constant_bytes_ = 0;
  std::array<uint32_t, 3> local_size_{};
  std::vector<std::pair<std::string, std::string>> statistics_;
};

// One buffer (range) for one binding of set 0.
struct BufferBinding {
  uint32_t binding = 0;
  const Buffer* buffer = nullptr;
  size_t offset = 0;             // must be a multiple of min{Storage,Uniform}BufferOffsetAlignment
  size_t range = VK_WHOLE_SIZE;  // VK_WHOLE_SIZE: from offset to the end of the buffer
};

// Hands out descriptor sets from a list of pools that grows when one is full. Sets live until
// Reset() or destruction, so a plan can own one allocator and drop all its sets at once.
class DescriptorAllocator {
 public:
  ~DescriptorAllocator();
  DescriptorAllocator(const DescriptorAllocator&) = delete;
  DescriptorAllocator& operator=(const DescriptorAllocator&) = delete;

  // Allocates a set for `pipeline` and writes `bindings` into it right away. Every binding the
  // shader declares must be given exactly once, with a buffer range inside the buffer and within
  // the device's range limits; anything else is InvalidArgumentError naming pipeline and binding.
  absl::StatusOr<VkDescriptorSet> Allocate(const ComputePipeline& pipeline,
                                           std::span<const BufferBinding> bindings,
                                           std::string_view debug_name = {});

  // Frees every set handed out so far (their pools are reset, not destroyed).
  absl::Status Reset();

  size_t sets_allocated() const { return sets_; }

 private:
  friend class Context;
  DescriptorAllocator(VkDevice device, const DeviceInfo& info,
                      PFN_vkSetDebugUtilsObjectNameEXT set_name);
  absl::Status AddPool();

  VkDevice device_;
  const DeviceInfo& info_;
  PFN_vkSetDebugUtilsObjectNameEXT set_name_;
  std::vector<VkDescriptorPool> pools_;
  size_t current_ = 0;  // pools before this one are full
  size_t sets_ = 0;
};

}  // namespace doppler::vk
