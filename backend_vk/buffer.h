// Buffers suballocated from a few large VkDeviceMemory blocks.
//
// One VkDeviceMemory per buffer is not an option: drivers cap the number of live allocations
// (maxMemoryAllocationCount, 4096 on NVIDIA) and each allocation is slow. Blocks are 256 MiB for
// device-local memory and 32 MiB for host-visible memory; a buffer larger than a block gets a
// dedicated allocation. Freed ranges are coalesced, and an empty block is returned to the driver.
//
// Not thread-safe: a Context and its buffers are used from one thread.
#pragma once

#include <vulkan/vulkan.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "backend_vk/device_info.h"

namespace doppler::vk {

enum class BufferKind {
  // Device memory (VRAM on a GPU). Storage, uniform, transfer source and destination.
  kDeviceLocal,
  // Host-visible, host-coherent, persistently mapped. Same usages. For readback of logits and
  // staging: host memory, cached where the device offers it.
  kHostVisible,
  // As kHostVisible, but in device memory the host can map (a resizable BAR) where the device has
  // such a type, else in host memory: for the small blocks every step's kernels read, which the
  // host writes or reads a few bytes of (step parameters, token ids). From host memory each
  // dispatch's first read of them crosses the bus: on the H100, this kind took Llama-3.1-8B's
  // decode from 392.5 / 392.3 to 404.8 / 404.9 tok/s. The host reads it uncached.
  kMappedDevice,
};

class MemoryAllocator;
struct MemoryBlock;  // one VkDeviceMemory and its free ranges (buffer.cc)

class Buffer {
 public:
  ~Buffer();  // destroys the VkBuffer and returns its range to the allocator
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  VkBuffer handle() const { return buffer_; }
  // The requested size rounded up to a multiple of 4 bytes (whole 32-bit words).
  size_t size() const { return size_; }
  BufferKind kind() const { return kind_; }
  const std::string& name() const { return name_; }
  // First byte of the buffer for the mapped kinds (coherent: no flush needed), nullptr otherwise.
  // Only touch it while no submitted work uses the buffer (Context::Submit waits, so: any time
  // between submits).
  void* mapped() const { return mapped_; }

 private:
  friend class MemoryAllocator;
  Buffer() = default;

  MemoryAllocator* allocator_ = nullptr;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  size_t size_ = 0;
  BufferKind kind_ = BufferKind::kDeviceLocal;
  std::string name_;
  void* mapped_ = nullptr;
  // Where the buffer lives: its block, and the offset and reserved length there.
  MemoryBlock* block_ = nullptr;
  VkDeviceSize offset_ = 0, reserved_ = 0;
};

// Owned by Context; everything below is for Context and Buffer only.
class MemoryAllocator {
 public:
  MemoryAllocator(VkDevice device, VkPhysicalDevice physical, const DeviceInfo& info,
                  PFN_vkSetDebugUtilsObjectNameEXT set_name);
  ~MemoryAllocator();  // all buffers must be destroyed first
  MemoryAllocator(const MemoryAllocator&) = delete;
  MemoryAllocator& operator=(const MemoryAllocator&) = delete;

  absl::StatusOr<std::unique_ptr<Buffer>> CreateBuffer(size_t bytes, BufferKind kind,
                                                       std::string_view debug_name);

  struct Stats {
    size_t blocks = 0;         // live VkDeviceMemory allocations
    uint64_t block_bytes = 0;  // their total size
    uint64_t used_bytes = 0;   // bytes reserved by live buffers (incl. alignment padding)
    size_t live_buffers = 0;
  };
  Stats stats() const;

 private:
  friend class Buffer;
  void Release(Buffer& buffer);
  absl::StatusOr<MemoryBlock*> Reserve(const VkMemoryRequirements& req, BufferKind kind,
                                       std::string_view name, size_t bytes, VkDeviceSize* offset);
  absl::StatusOr<MemoryBlock*> NewBlock(uint32_t type_index, VkDeviceSize size, bool dedicated,
                                        bool map, std::string_view name, size_t bytes);
  std::vector<uint32_t> MemoryTypeCandidates(uint32_t type_bits, BufferKind kind) const;

  VkDevice device_;
  const DeviceInfo& info_;
  PFN_vkSetDebugUtilsObjectNameEXT set_name_;
  VkPhysicalDeviceMemoryProperties mem_props_;
  std::vector<std::unique_ptr<MemoryBlock>> blocks_;
  size_t live_buffers_ = 0;
};

}  // namespace doppler::vk
