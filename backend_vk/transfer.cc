// Context's buffer factory and host <-> device transfers.
//
// Device-local memory is not host-visible on a discrete GPU, so uploads and downloads go through a
// host-visible staging buffer in chunks of up to 64 MiB: big enough to keep the copy engine busy
// while loading weights, small enough not to double the host memory held during a load.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "backend_vk/context.h"
#include "backend_vk/vk_util.h"

namespace doppler::vk {
namespace {

constexpr size_t kStagingMax = 64u << 20;
constexpr size_t kStagingMin = 1u << 20;

absl::Status CheckRange(const Buffer& b, size_t offset, size_t bytes, const char* op) {
  if (offset > b.size() || bytes > b.size() - offset) {
    return absl::OutOfRangeError(
        absl::StrFormat("%s of %d bytes at offset %d overruns buffer '%s' of %d bytes", op, bytes,
                        offset, b.name(), b.size()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Buffer>> Context::CreateBuffer(size_t bytes, BufferKind kind,
                                                              std::string_view debug_name) {
  return allocator_->CreateBuffer(bytes, kind, debug_name);
}

absl::Status Context::EnsureStaging(size_t bytes) {
  const size_t cap = std::min<size_t>(kStagingMax, info_.max_storage_buffer_range);
  const size_t want = std::min(std::max(bytes, kStagingMin), cap);
  if (staging_ != nullptr && staging_->size() >= want) return absl::OkStatus();
  size_t size = kStagingMin;
  while (size < want) size *= 2;
  staging_.reset();
  absl::StatusOr<std::unique_ptr<Buffer>> b =
      CreateBuffer(std::min(size, cap), BufferKind::kHostVisible, "doppler staging");
  if (!b.ok()) return b.status();
  staging_ = std::move(*b);
  return absl::OkStatus();
}

template <typename RecordFn>
absl::Status Context::RunTransfer(std::string_view what, RecordFn record) {
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;  // re-recorded for every chunk
  DOPPLER_VK_CHECK(vkBeginCommandBuffer(transfer_cmd_, &bi));
  // Order after whatever earlier submissions wrote, and make the copy visible to everything after
  // it (later submissions and the host) so callers never need their own barrier for it.
  VkMemoryBarrier before{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  before.srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT;
  before.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  vkCmdPipelineBarrier(transfer_cmd_, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
                       VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &before, 0, nullptr, 0, nullptr);
  record(transfer_cmd_);
  VkMemoryBarrier after{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  after.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  after.dstAccessMask =
      VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT | VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(transfer_cmd_, VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_PIPELINE_STAGE_ALL_COMMANDS_BIT | VK_PIPELINE_STAGE_HOST_BIT, 0, 1,
                       &after, 0, nullptr, 0, nullptr);
  DOPPLER_VK_CHECK(vkEndCommandBuffer(transfer_cmd_));
  return SubmitAndWait(transfer_cmd_, what);
}

absl::Status Context::Upload(Buffer& dst, size_t offset, const void* src, size_t bytes) {
  if (absl::Status s = CheckRange(dst, offset, bytes, "upload"); !s.ok()) return s;
  if (bytes == 0) return absl::OkStatus();
  if (src == nullptr) return absl::InvalidArgumentError("upload from a null pointer");
  if (dst.mapped() != nullptr) {
    std::memcpy(static_cast<char*>(dst.mapped()) + offset, src, bytes);
    return absl::OkStatus();
  }
  if (absl::Status s = EnsureStaging(bytes); !s.ok()) return s;
  const std::string what = absl::StrFormat("upload to '%s'", dst.name());
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(bytes - done, staging_->size());
    std::memcpy(staging_->mapped(), static_cast<const char*>(src) + done, n);
    absl::Status s = RunTransfer(what, [&](VkCommandBuffer c) {
      VkBufferCopy region{0, offset + done, n};
      vkCmdCopyBuffer(c, staging_->handle(), dst.handle(), 1, &region);
    });
    if (!s.ok()) return s;
    done += n;
  }
  return absl::OkStatus();
}

absl::Status Context::Download(const Buffer& src, size_t offset, void* dst, size_t bytes) {
  if (absl::Status s = CheckRange(src, offset, bytes, "download"); !s.ok()) return s;
  if (bytes == 0) return absl::OkStatus();
  if (dst == nullptr) return absl::InvalidArgumentError("download into a null pointer");
  if (src.mapped() != nullptr) {
    std::memcpy(dst, static_cast<const char*>(src.mapped()) + offset, bytes);
    return absl::OkStatus();
  }
  if (absl::Status s = EnsureStaging(bytes); !s.ok()) return s;
  const std::string what = absl::StrFormat("download from '%s'", src.name());
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(bytes - done, staging_->size());
    absl::Status s = RunTransfer(what, [&](VkCommandBuffer c) {
      VkBufferCopy region{offset + done, 0, n};
      vkCmdCopyBuffer(c, src.handle(), staging_->handle(), 1, &region);
    });
    if (!s.ok()) return s;
    std::memcpy(static_cast<char*>(dst) + done, staging_->mapped(), n);
    done += n;
  }
  return absl::OkStatus();
}

absl::Status Context::Fill(Buffer& dst, uint32_t value) {
  if (dst.size() < 4) return absl::OkStatus();  // no whole 32-bit word to fill
  return RunTransfer(absl::StrFormat("fill of '%s'", dst.name()), [&](VkCommandBuffer c) {
    vkCmdFillBuffer(c, dst.handle(), 0, VK_WHOLE_SIZE, value);
  });
}

}  // namespace doppler::vk
