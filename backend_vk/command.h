// A command buffer recorded once and replayed by Context::Submit as often as needed.
//
// Recording calls do not return a Status each: the first misuse (dispatch without a pipeline,
// too many workgroups, out-of-range copy, oversized push constants) is remembered and returned by
// End(), and nothing after it is recorded. That keeps a scheduler's recording loop readable
// while still turning every mistake into an error value.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>

#include "absl/status/status.h"
#include "backend_vk/buffer.h"
#include "backend_vk/pipeline.h"

namespace doppler::vk {

class TimestampPool;

class CommandBuffer {
 public:
  ~CommandBuffer();
  CommandBuffer(const CommandBuffer&) = delete;
  CommandBuffer& operator=(const CommandBuffer&) = delete;

  // Starts (re)recording; discards what was recorded before. Records a leading barrier so the
  // first commands of a replay are ordered after everything the previous submission wrote.
  absl::Status Begin();

  void BindPipeline(const ComputePipeline& pipeline);
  // Binds `set` as set 0 for the currently bound pipeline.
  void BindDescriptorSet(VkDescriptorSet set);
  // Push constants for the currently bound pipeline; offset + bytes must fit its push range.
  void PushConstants(const void* data, uint32_t bytes, uint32_t offset = 0);
  // Workgroup counts (not invocations); each must be in [1, maxComputeWorkGroupCount].
  void Dispatch(uint32_t x, uint32_t y = 1, uint32_t z = 1);

  // Shader writes -> later shader reads/writes (compute to compute). Between dependent dispatches.
  void ComputeBarrier();
  // Any compute or transfer write -> later compute or transfer read/write. After a CopyBuffer or
  // FillBuffer whose result a dispatch reads, or before copying what a dispatch wrote.
  void FullBarrier();

  void CopyBuffer(const Buffer& src, size_t src_offset, const Buffer& dst, size_t dst_offset,
                  size_t bytes);
  // Fills [offset, offset + bytes) with `value`; offset and bytes must be multiples of 4.
  void FillBuffer(const Buffer& dst, size_t offset, size_t bytes, uint32_t value);

  // Timestamps (only when DeviceInfo::timestamps): reset the pool's queries once per recording,
  // before writing them; WriteTimestamp records when all previous commands have finished.
  void ResetTimestamps(const TimestampPool& pool);
  void WriteTimestamp(const TimestampPool& pool, uint32_t query);

  // Ends recording. Records a final barrier making every write visible to the host, so mapped
  // host-visible buffers can be read right after Context::Submit returns. Returns the first
  // recording error, if any; such a buffer cannot be submitted.
  absl::Status End();

  bool ready() const { return state_ == State::kReady; }
  // Submitted by Context::Start and not yet waited for by Context::Finish.
  bool pending() const { return pending_; }
  VkCommandBuffer handle() const { return cmd_; }
  uint32_t dispatch_count() const { return dispatches_; }

 private:
  friend class Context;
  CommandBuffer() = default;
  bool Recording();  // false (and records an error) when not between Begin and End
  void Fail(absl::Status s);
  void Barrier(VkPipelineStageFlags src_stage, VkAccessFlags src_access,
               VkPipelineStageFlags dst_stage, VkAccessFlags dst_access);

  enum class State { kInitial, kRecording, kReady, kFailed };
  VkDevice device_ = VK_NULL_HANDLE;
  const DeviceInfo* info_ = nullptr;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  State state_ = State::kInitial;
  bool vk_recording_ = false;  // between vkBeginCommandBuffer and vkEndCommandBuffer
  absl::Status error_;
  const ComputePipeline* bound_ = nullptr;
  VkFence fence_ = VK_NULL_HANDLE;  // Context::Start's, made on first use
  bool pending_ = false;
  uint32_t dispatches_ = 0;
};

// A VkQueryPool of timestamps. Read with Context::ReadTimestamps after the submit.
class TimestampPool {
 public:
  ~TimestampPool();
  TimestampPool(const TimestampPool&) = delete;
  TimestampPool& operator=(const TimestampPool&) = delete;

  VkQueryPool handle() const { return pool_; }
  uint32_t count() const { return count_; }

 private:
  friend class Context;
  TimestampPool() = default;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueryPool pool_ = VK_NULL_HANDLE;
  uint32_t count_ = 0;
};

}  // namespace doppler::vk
