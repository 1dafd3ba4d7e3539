#include "backend_vk/command.h"

#include "absl/strings/str_format.h"
#include "backend_vk/context.h"
#include "backend_vk/vk_util.h"

namespace doppler::vk {

CommandBuffer::~CommandBuffer() {
  if (fence_ != VK_NULL_HANDLE) {
    // A buffer still pending must finish before its pool goes.
    if (pending_) vkWaitForFences(device_, 1, &fence_, VK_TRUE, UINT64_MAX);
    vkDestroyFence(device_, fence_, nullptr);
  }
  // Destroying the pool frees its command buffer.
  if (pool_ != VK_NULL_HANDLE) vkDestroyCommandPool(device_, pool_, nullptr);
}

void CommandBuffer::Fail(absl::Status s) {
  if (state_ == State::kRecording) {
    error_ = std::move(s);
    state_ = State::kFailed;
  }
}

bool CommandBuffer::Recording() {
  if (state_ == State::kRecording) return true;
  if (state_ != State::kFailed) {
    error_ = absl::FailedPreconditionError("command recorded outside Begin()/End()");
    state_ = State::kFailed;
  }
  return false;
}

void CommandBuffer::Barrier(VkPipelineStageFlags src_stage, VkAccessFlags src_access,
                            VkPipelineStageFlags dst_stage, VkAccessFlags dst_access) {
  VkMemoryBarrier b{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  b.srcAccessMask = src_access;
  b.dstAccessMask = dst_access;
  vkCmdPipelineBarrier(cmd_, src_stage, dst_stage, 0, 1, &b, 0, nullptr, 0, nullptr);
}

absl::Status CommandBuffer::Begin() {
  if (pending_) return absl::FailedPreconditionError("Begin() on a command buffer still pending");
  // Begin while still recording is invalid in Vulkan; close the abandoned recording first.
  if (vk_recording_) vkEndCommandBuffer(cmd_);
  vk_recording_ = false;
  // No ONE_TIME_SUBMIT: the whole point is to replay this recording step after step.
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  if (VkResult r = vkBeginCommandBuffer(cmd_, &bi); r != VK_SUCCESS) {
    state_ = State::kInitial;
    return VkFailure("vkBeginCommandBuffer", r);
  }
  state_ = State::kRecording;
  vk_recording_ = true;
  error_ = absl::OkStatus();
  bound_ = nullptr;
  dispatches_ = 0;
  // The previous replay (or an upload) may have written what this one reads, or may read what
  // this one overwrites: order every command here after all earlier work on the queue.
  Barrier(VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_ACCESS_MEMORY_WRITE_BIT,
          VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
          VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT);
  return absl::OkStatus();
}

void CommandBuffer::BindPipeline(const ComputePipeline& pipeline) {
  if (!Recording()) return;
  vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.handle());
  bound_ = &pipeline;
}

void CommandBuffer::BindDescriptorSet(VkDescriptorSet set) {
  if (!Recording()) return;
  if (bound_ == nullptr)
    return Fail(absl::FailedPreconditionError("BindDescriptorSet before BindPipeline"));
  if (set == VK_NULL_HANDLE) {
    return Fail(absl::InvalidArgumentError(
        absl::StrFormat("null descriptor set for pipeline '%s'", bound_->name())));
  }
  vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, bound_->layout(), 0, 1, &set, 0,
                          nullptr);
}

void CommandBuffer::PushConstants(const void* data, uint32_t bytes, uint32_t offset) {
  if (!Recording()) return;
  if (bound_ == nullptr)
    return Fail(absl::FailedPreconditionError("PushConstants before BindPipeline"));
  const uint32_t range = static_cast<uint32_t>(AlignUp(bound_->push_constant_bytes(), 4));
  if (bytes == 0 || data == nullptr || offset % 4 != 0 || bytes % 4 != 0 ||
      uint64_t{offset} + bytes > range) {
    return Fail(absl::InvalidArgumentError(absl::StrFormat(
        "pipeline '%s': push constants [%d, %d) do not fit its %d-byte range (or are not "
        "4-byte aligned)",
        bound_->name(), offset, uint64_t{offset} + bytes, range)));
  }
  vkCmdPushConstants(cmd_, bound_->layout(), VK_SHADER_STAGE_COMPUTE_BIT, offset, bytes, data);
}

void CommandBuffer::Dispatch(uint32_t x, uint32_t y, uint32_t z) {
  if (!Recording()) return;
  if (bound_ == nullptr) return Fail(absl::FailedPreconditionError("Dispatch before BindPipeline"));
  const uint32_t counts[3] = {x, y, z};
  for (int i = 0; i < 3; ++i) {
    if (counts[i] == 0 || counts[i] > info_->max_workgroup_count[i]) {
      return Fail(absl::InvalidArgumentError(absl::StrFormat(
          "pipeline '%s': dispatch (%d, %d, %d) has workgroup count %d in dimension %d, outside "
          "[1, %d]",
          bound_->name(), x, y, z, counts[i], i, info_->max_workgroup_count[i])));
    }
  }
  vkCmdDispatch(cmd_, x, y, z);
  ++dispatches_;
}

void CommandBuffer::ComputeBarrier() {
  if (!Recording()) return;
  Barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
          VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
          VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
}

void CommandBuffer::FullBarrier() {
  if (!Recording()) return;
  constexpr VkPipelineStageFlags kStages =
      VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  Barrier(kStages, VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT, kStages,
          VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
              VK_ACCESS_TRANSFER_WRITE_BIT);
}

void CommandBuffer::CopyBuffer(const Buffer& src, size_t src_offset, const Buffer& dst,
                               size_t dst_offset, size_t bytes) {
  if (!Recording()) return;
  if (bytes == 0 || src_offset > src.size() || bytes > src.size() - src_offset ||
      dst_offset > dst.size() || bytes > dst.size() - dst_offset) {
    return Fail(absl::OutOfRangeError(absl::StrFormat(
        "copy of %d bytes from '%s' (%d bytes) at %d to '%s' (%d bytes) at %d is out of range",
        bytes, src.name(), src.size(), src_offset, dst.name(), dst.size(), dst_offset)));
  }
  if (&src == &dst && src_offset < dst_offset + bytes && dst_offset < src_offset + bytes) {
    return Fail(absl::InvalidArgumentError(
        absl::StrFormat("copy within '%s' with overlapping ranges", src.name())));
  }
  VkBufferCopy region{src_offset, dst_offset, bytes};
  vkCmdCopyBuffer(cmd_, src.handle(), dst.handle(), 1, &region);
}

void CommandBuffer::FillBuffer(const Buffer& dst, size_t offset, size_t bytes, uint32_t value) {
  if (!Recording()) return;
  if (bytes == 0 || offset % 4 != 0 || bytes % 4 != 0 || offset > dst.size() ||
      bytes > dst.size() - offset) {
    return Fail(absl::InvalidArgumentError(absl::StrFormat(
        "fill of %d bytes at %d in '%s' (%d bytes) is out of range or not 4-byte aligned", bytes,
        offset, dst.name(), dst.size())));
  }
  vkCmdFillBuffer(cmd_, dst.handle(), offset, bytes, value);
}

void CommandBuffer::ResetTimestamps(const TimestampPool& pool) {
  if (!Recording()) return;
  if (!info_->timestamps) return Fail(absl::FailedPreconditionError("device has no timestamps"));
  vkCmdResetQueryPool(cmd_, pool.handle(), 0, pool.count());
}

void CommandBuffer::WriteTimestamp(const TimestampPool& pool, uint32_t query) {
  if (!Recording()) return;
  if (query >= pool.count()) {
    return Fail(absl::OutOfRangeError(
        absl::StrFormat("timestamp query %d of a pool of %d", query, pool.count())));
  }
  vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool.handle(), query);
}

absl::Status CommandBuffer::End() {
  if (state_ == State::kRecording) {
    // Make all writes visible to host reads of mapped memory once the submit's fence signals.
    Barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
            VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
            VK_ACCESS_HOST_READ_BIT);
  }
  // End even a failed recording, so the buffer is not left in the recording state.
  const VkResult r = vk_recording_ ? vkEndCommandBuffer(cmd_) : VK_SUCCESS;
  vk_recording_ = false;
  if (state_ == State::kFailed) return error_;
  if (state_ != State::kRecording) return absl::FailedPreconditionError("End() without Begin()");
  if (r != VK_SUCCESS) {
    state_ = State::kFailed;
    error_ = VkFailure("vkEndCommandBuffer", r);
    return error_;
  }
  state_ = State::kReady;
  return absl::OkStatus();
}

TimestampPool::~TimestampPool() {
  if (pool_ != VK_NULL_HANDLE) vkDestroyQueryPool(device_, pool_, nullptr);
}

absl::StatusOr<std::unique_ptr<CommandBuffer>> Context::CreateCommandBuffer(
    std::string_view debug_name) {
  std::unique_ptr<CommandBuffer> c(new CommandBuffer());
  c->device_ = device_;
  c->info_ = &info_;
  // One pool per command buffer: it can be reset and re-recorded on its own, and pools are cheap.
  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = queue_family_;
  DOPPLER_VK_CHECK(vkCreateCommandPool(device_, &pci, nullptr, &c->pool_));
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = c->pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  DOPPLER_VK_CHECK(vkAllocateCommandBuffers(device_, &ai, &c->cmd_));
  SetDebugName(VK_OBJECT_TYPE_COMMAND_BUFFER, reinterpret_cast<uint64_t>(c->cmd_), debug_name);
  return c;
}

absl::Status Context::Submit(CommandBuffer& cmd) {
  if (absl::Status s = Start(cmd); !s.ok()) return s;
  return Finish(cmd);
}

absl::Status Context::Start(CommandBuffer& cmd) {
  if (!cmd.ready()) {
    return absl::FailedPreconditionError(
        "Submit of a command buffer that is not recorded (call Begin() ... End() first)");
  }
  if (cmd.pending_) return absl::FailedPreconditionError("Submit of a command buffer still pending (Finish it first)");
  if (cmd.fence_ == VK_NULL_HANDLE) {
    VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    DOPPLER_VK_CHECK(vkCreateFence(device_, &fci, nullptr, &cmd.fence_));
  }
  if (absl::Status s = SubmitWithFence(cmd.handle(), cmd.fence_, "command buffer"); !s.ok()) return s;
  cmd.pending_ = true;
  return absl::OkStatus();
}

absl::Status Context::Finish(CommandBuffer& cmd) {
  if (!cmd.pending_) return absl::OkStatus();
  absl::Status s = WaitForFence(cmd.fence_, "command buffer");
  // After a timeout the work may still run: the buffer stays pending (and the Context refuses work).
  if (s.ok()) cmd.pending_ = false;
  return s;
}

absl::StatusOr<std::unique_ptr<TimestampPool>> Context::CreateTimestampPool(uint32_t count) {
  if (!info_.timestamps) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s has no timestamp support on its compute queue", info_.name));
  }
  if (count == 0) return absl::InvalidArgumentError("timestamp pool of 0 queries");
  std::unique_ptr<TimestampPool> p(new TimestampPool());
  p->device_ = device_;
  p->count_ = count;
  VkQueryPoolCreateInfo ci{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
  ci.queryType = VK_QUERY_TYPE_TIMESTAMP;
  ci.queryCount = count;
  DOPPLER_VK_CHECK(vkCreateQueryPool(device_, &ci, nullptr, &p->pool_));
  return p;
}

absl::StatusOr<std::vector<double>> Context::ReadTimestamps(const TimestampPool& pool) {
  std::vector<uint64_t> ticks(pool.count());
  // No WAIT bit: the submit already waited, and a query that was never written must give an
  // error (VK_NOT_READY) rather than block forever.
  const VkResult r = vkGetQueryPoolResults(device_, pool.handle(), 0, pool.count(),
                                           ticks.size() * sizeof(uint64_t), ticks.data(),
                                           sizeof(uint64_t), VK_QUERY_RESULT_64_BIT);
  if (r == VK_NOT_READY) {
    return absl::FailedPreconditionError("some timestamp queries were not written by the submit");
  }
  if (r != VK_SUCCESS) return VkFailure("vkGetQueryPoolResults", r);
  std::vector<double> ns(ticks.size());
  for (size_t i = 0; i < ticks.size(); ++i) ns[i] = ticks[i] * double{info_.timestamp_period_ns};
  return ns;
}

}  // namespace doppler::vk
