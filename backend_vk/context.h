// The Vulkan instance, the chosen device and its compute queue, and the factories for everything
// that lives on the device (buffers, pipelines, descriptor sets, command buffers).
//
// Usage, as the scheduler sees it:
//   auto ctx = Context::Create({});                       // picks the best device
//   auto w = ctx->CreateBuffer(bytes, BufferKind::kDeviceLocal, "blk.0.attn_q");
//   ctx->Upload(**w, 0, host_ptr, bytes);                   // through a reusable staging buffer
//   auto p = ctx->CreatePipeline(compiled_shader, "rms_norm");
//   auto set = ctx->AllocateDescriptorSet(**p, bindings);   // once, at plan build
//   auto cmd = ctx->CreateCommandBuffer("decode");
//   cmd->Begin(); ... Bind/Dispatch/ComputeBarrier ... cmd->End();   // once
//   loop: write step params into a host-visible buffer; ctx->Submit(*cmd); read mapped result.
//
// Not thread-safe: use a Context (and what it created) from one thread. Everything created by a
// Context must be destroyed before it. Submit waits for completion; Start and Finish split that in
// two, so that the host can work while the GPU runs.
#pragma once

#include <vulkan/vulkan.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "backend_vk/buffer.h"
#include "backend_vk/command.h"
#include "backend_vk/device_info.h"
#include "backend_vk/pipeline.h"
#include "codegen/shader_compiler.h"

namespace doppler::vk {

struct ContextOptions {
  // Khronos validation layer + a debug messenger counting WARNING/ERROR messages. Also turned on
  // by env DOPPLER_VALIDATION=1; DOPPLER_VALIDATION=sync adds synchronization validation.
  bool validation = false;
  bool sync_validation = false;
  // Index into vkEnumeratePhysicalDevices order (see EnumerateDevices); default: best type.
  std::optional<int> device_index;
  // Picks the first device whose name contains this (case-sensitive), if device_index is unset.
  std::optional<std::string> device_name;
  // A submit that has not finished by then is an error (DeadlineExceeded), never a hang.
  std::chrono::milliseconds submit_timeout = std::chrono::minutes(5);
};

class Context {
 public:
  static absl::StatusOr<std::unique_ptr<Context>> Create(const ContextOptions& options = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const DeviceInfo& info() const { return info_; }
  bool validation_enabled() const { return validation_; }
  // WARNING and ERROR messages from the validation layer (and loader) since Create. Each is also
  // printed to stderr.
  int validation_messages() const { return validation_messages_.load(); }
  // Number of vkQueueSubmit calls, including the ones Upload/Download/Fill make internally.
  uint64_t submit_count() const { return submit_count_; }

  // --- buffers (buffer.h)
  absl::StatusOr<std::unique_ptr<Buffer>> CreateBuffer(size_t bytes, BufferKind kind,
                                                       std::string_view debug_name);
  // Host -> buffer. Device-local buffers go through the staging buffer in chunks (each chunk is
  // one submit); host-visible ones are written through their mapping.
  absl::Status Upload(Buffer& dst, size_t offset, const void* src, size_t bytes);
  // Buffer -> host, the same way round.
  absl::Status Download(const Buffer& src, size_t offset, void* dst, size_t bytes);
  // Fills the whole buffer with a 32-bit pattern (the last size % 4 bytes are left alone).
  absl::Status Fill(Buffer& dst, uint32_t value);
  MemoryAllocator::Stats memory_stats() const { return allocator_->stats(); }

  // --- pipelines and descriptor sets (pipeline.h)
  absl::StatusOr<std::unique_ptr<ComputePipeline>> CreatePipeline(
      const codegen::CompiledShader& shader, std::string_view name,
      const PipelineOptions& options = {});
  // A descriptor-set allocator a plan can own (sets freed with it).
  absl::StatusOr<std::unique_ptr<DescriptorAllocator>> CreateDescriptorAllocator();
  // From the Context's own allocator; the set lives as long as the Context.
  absl::StatusOr<VkDescriptorSet> AllocateDescriptorSet(const ComputePipeline& pipeline,
                                                        std::span<const BufferBinding> bindings,
                                                        std::string_view debug_name = {});

  // --- commands (command.h)
  absl::StatusOr<std::unique_ptr<CommandBuffer>> CreateCommandBuffer(std::string_view debug_name);
  // Submits a recorded (End()ed) command buffer and waits for it. Re-submitting the same buffer
  // replays it; host-visible inputs written in between are seen by the replay.
  absl::Status Submit(CommandBuffer& cmd);
  // The same in two halves, so that the host can queue more work while the GPU runs this: Start
  // submits (the buffer must not be pending already), Finish waits until it has run (at once where
  // it is not pending). Work submitted later runs after it, as the queue orders submissions.
  absl::Status Start(CommandBuffer& cmd);
  absl::Status Finish(CommandBuffer& cmd);
  absl::StatusOr<std::unique_ptr<TimestampPool>> CreateTimestampPool(uint32_t count);
  // Nanoseconds of each query since an arbitrary origin, after the submit that wrote them.
  absl::StatusOr<std::vector<double>> ReadTimestamps(const TimestampPool& pool);

  // Raw handles, for code that needs Vulkan directly (profiling, interop).
  VkInstance instance() const { return instance_; }
  VkPhysicalDevice physical_device() const { return physical_; }
  VkDevice device() const { return device_; }
  VkQueue queue() const { return queue_; }
  uint32_t queue_family() const { return queue_family_; }
  // Names a Vulkan object for validation messages and GPU debuggers; no-op without debug utils.
  void SetDebugName(VkObjectType type, uint64_t handle, std::string_view name) const;

 private:
  Context() = default;
  absl::Status Init(const ContextOptions& options);
  absl::Status CreateInstance(bool sync_validation);
  absl::Status PickDevice(const ContextOptions& options);
  absl::Status CreateDevice();
  // Submits one primary command buffer and waits on the fence.
  absl::Status SubmitAndWait(VkCommandBuffer cmd, std::string_view what);
  // The two halves every submit goes through: a submit signalling `fence`, and the wait for it
  // (bounded by the submit timeout; a timeout or a lost device makes the Context refuse later work).
  absl::Status SubmitWithFence(VkCommandBuffer cmd, VkFence fence, std::string_view what);
  absl::Status WaitForFence(VkFence fence, std::string_view what);
  // Records one transfer via `record` into the internal transfer command buffer and runs it.
  template <typename RecordFn>
  absl::Status RunTransfer(std::string_view what, RecordFn record);
  absl::Status EnsureStaging(size_t bytes);

  static VKAPI_ATTR VkBool32 VKAPI_CALL DebugCallback(
      VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT types,
      const VkDebugUtilsMessengerCallbackDataEXT* data, void* user);

  bool validation_ = false;
  bool pipeline_statistics_ = false;  // VK_KHR_pipeline_executable_properties enabled
  std::atomic<int> validation_messages_{0};
  uint64_t submit_count_ = 0;
  std::chrono::milliseconds submit_timeout_{0};
  absl::Status lost_;  // set once a submit times out or the device is lost; later work refuses

  uint32_t instance_api_ = 0;
  VkInstance instance_ = VK_NULL_HANDLE;
  bool debug_utils_ = false;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  PFN_vkSetDebugUtilsObjectNameEXT set_name_ = nullptr;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  DeviceInfo info_;
  VkDevice device_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  VkQueue queue_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;

  std::unique_ptr<MemoryAllocator> allocator_;
  std::unique_ptr<DescriptorAllocator> descriptors_;
  // Internal transfers (Upload/Download/Fill): one command buffer re-recorded per chunk, and a
  // host-visible staging buffer kept between calls so weight loading does not reallocate it.
  VkCommandPool transfer_pool_ = VK_NULL_HANDLE;
  VkCommandBuffer transfer_cmd_ = VK_NULL_HANDLE;
  std::unique_ptr<Buffer> staging_;
};

}  // namespace doppler::vk
