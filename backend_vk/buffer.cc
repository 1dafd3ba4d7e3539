#include "backend_vk/buffer.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "backend_vk/vk_util.h"

namespace doppler::vk {

struct MemoryBlock {
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkDeviceSize size = 0;
  uint32_t type_index = 0;
  BufferKind kind = BufferKind::kDeviceLocal;
  bool dedicated = false;                     // holds exactly one buffer; never shared
  void* mapped = nullptr;                     // whole block mapped once, for host-visible kinds
  std::map<VkDeviceSize, VkDeviceSize> free;  // offset -> length, coalesced
  VkDeviceSize used = 0;
};

namespace {

constexpr VkDeviceSize kDeviceLocalBlock = 256ull << 20;
constexpr VkDeviceSize kHostVisibleBlock = 32ull << 20;
// Small, since some devices map only 256 MiB of their memory to the host.
constexpr VkDeviceSize kMappedDeviceBlock = 1ull << 20;

const char* KindName(BufferKind k) {
  switch (k) {
    case BufferKind::kDeviceLocal: return "device-local";
    case BufferKind::kHostVisible: return "host-visible";
    case BufferKind::kMappedDevice: return "mapped device";
  }
  return "?";
}

// First fit with alignment; on success removes the range from `free` and returns its offset.
std::optional<VkDeviceSize> TakeRange(MemoryBlock& b, VkDeviceSize size, VkDeviceSize align) {
  for (auto it = b.free.begin(); it != b.free.end(); ++it) {
    const VkDeviceSize off = it->first, len = it->second;
    const VkDeviceSize start = AlignUp(off, align);
    if (start + size > off + len) continue;
    b.free.erase(it);
    if (start > off) b.free.emplace(off, start - off);
    if (start + size < off + len) b.free.emplace(start + size, off + len - (start + size));
    b.used += size;
    return start;
  }
  return std::nullopt;
}

void ReturnRange(MemoryBlock& b, VkDeviceSize off, VkDeviceSize len) {
  b.used -= len;
  auto next = b.free.lower_bound(off);
  if (next != b.free.end() && off + len == next->first) {
    len += next->second;
    next = b.free.erase(next);
  }
  if (next != b.free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += len;
      return;
    }
  }
  b.free.emplace(off, len);
}

}  // namespace

Buffer::~Buffer() {
  if (allocator_ != nullptr) allocator_->Release(*this);
}

MemoryAllocator::MemoryAllocator(VkDevice device, VkPhysicalDevice physical, const DeviceInfo& info,
                                 PFN_vkSetDebugUtilsObjectNameEXT set_name)
    : device_(device), info_(info), set_name_(set_name) {
  vkGetPhysicalDeviceMemoryProperties(physical, &mem_props_);
}

MemoryAllocator::~MemoryAllocator() {
  for (const auto& b : blocks_) vkFreeMemory(device_, b->memory, nullptr);
}

MemoryAllocator::Stats MemoryAllocator::stats() const {
  Stats s;
  s.blocks = blocks_.size();
  for (const auto& b : blocks_) {
    s.block_bytes += b->size;
    s.used_bytes += b->used;
  }
  s.live_buffers = live_buffers_;
  return s;
}

std::vector<uint32_t> MemoryAllocator::MemoryTypeCandidates(uint32_t type_bits,
                                                            BufferKind kind) const {
  constexpr VkMemoryPropertyFlags kHostVisibleCoherent =
      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  // Protected memory and AMD's device-coherent types are special purpose (and slow); never pick.
  constexpr VkMemoryPropertyFlags kAvoid =
      VK_MEMORY_PROPERTY_PROTECTED_BIT | VK_MEMORY_PROPERTY_DEVICE_COHERENT_BIT_AMD;
  std::vector<std::pair<int, uint32_t>> scored;
  for (uint32_t i = 0; i < mem_props_.memoryTypeCount; ++i) {
    if (!(type_bits & (1u << i))) continue;
    const VkMemoryPropertyFlags f = mem_props_.memoryTypes[i].propertyFlags;
    if (f & kAvoid) continue;
    const bool device_local = f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    const bool host_visible = f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
    int score;
    if (kind == BufferKind::kDeviceLocal) {
      // Plain VRAM first: a DEVICE_LOCAL|HOST_VISIBLE type is often the small BAR window.
      score = (device_local ? 4 : 0) + (host_visible ? 0 : 2);
    } else {
      if ((f & kHostVisibleCoherent) != kHostVisibleCoherent) continue;
      // Cached host memory makes host reads of logits fast; kMappedDevice puts device memory
      // before all of it, for the GPU's reads.
      score = ((f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) ? 4 : 0) + (device_local ? 0 : 2);
      if (kind == BufferKind::kMappedDevice && device_local) score += 8;
    }
    scored.emplace_back(-score, i);
  }
  std::sort(scored.begin(), scored.end());
  std::vector<uint32_t> out;
  for (const auto& [neg_score, i] : scored) out.push_back(i);
  return out;
}

absl::StatusOr<MemoryBlock*> MemoryAllocator::NewBlock(uint32_t type_index, VkDeviceSize size,
                                                       bool dedicated, bool map,
                                                       std::string_view name, size_t bytes) {
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.allocationSize = size;
  ai.memoryTypeIndex = type_index;
  auto block = std::make_unique<MemoryBlock>();
  VkResult r = vkAllocateMemory(device_, &ai, nullptr, &block->memory);
  if (r != VK_SUCCESS) {
    return VkFailure("vkAllocateMemory", r,
                     absl::StrFormat("%d-byte block of memory type %d for buffer '%s' of %d bytes",
                                     size, type_index, name, bytes));
  }
  if (map) {
    r = vkMapMemory(device_, block->memory, 0, VK_WHOLE_SIZE, 0, &block->mapped);
    if (r != VK_SUCCESS) {
      vkFreeMemory(device_, block->memory, nullptr);
      return VkFailure("vkMapMemory", r, absl::StrFormat("block for buffer '%s'", name));
    }
  }
  block->size = size;
  block->type_index = type_index;
  block->dedicated = dedicated;
  block->free.emplace(0, size);
  SetObjectName(
      device_, set_name_, VK_OBJECT_TYPE_DEVICE_MEMORY, reinterpret_cast<uint64_t>(block->memory),
      dedicated ? absl::StrFormat("doppler dedicated: %s", name)
                : absl::StrFormat("doppler block %d (type %d)", blocks_.size(), type_index));
  blocks_.push_back(std::move(block));
  return blocks_.back().get();
}

absl::StatusOr<MemoryBlock*> MemoryAllocator::Reserve(const VkMemoryRequirements& req,
                                                      BufferKind kind, std::string_view name,
                                                      size_t bytes, VkDeviceSize* offset) {
  const std::vector<uint32_t> types = MemoryTypeCandidates(req.memoryTypeBits, kind);
  if (types.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "buffer '%s': the device has no %s memory type usable for buffers", name, KindName(kind)));
  }
  const bool map = kind != BufferKind::kDeviceLocal;
  VkDeviceSize block_size = kind == BufferKind::kDeviceLocal   ? kDeviceLocalBlock
                            : kind == BufferKind::kHostVisible ? kHostVisibleBlock
                                                               : kMappedDeviceBlock;
  if (info_.max_memory_allocation_size > 0) {
    block_size = std::min(block_size, info_.max_memory_allocation_size);
  }
  absl::Status last_error;
  for (uint32_t type : types) {
    const VkMemoryHeap& heap = mem_props_.memoryHeaps[mem_props_.memoryTypes[type].heapIndex];
    if (req.size > heap.size) {
      last_error = absl::ResourceExhaustedError(
          absl::StrFormat("buffer '%s' needs %d bytes but memory heap %d holds only %d bytes", name,
                          req.size, mem_props_.memoryTypes[type].heapIndex, heap.size));
      continue;
    }
    if (req.size > block_size) {
      absl::StatusOr<MemoryBlock*> b =
          NewBlock(type, req.size, /*dedicated=*/true, map, name, bytes);
      if (!b.ok()) {
        last_error = b.status();
        continue;
      }
      (*b)->kind = kind;
      *offset = *TakeRange(**b, req.size, 1);
      return *b;
    }
    for (const auto& b : blocks_) {
      if (b->dedicated || b->type_index != type || b->kind != kind) continue;
      if (std::optional<VkDeviceSize> off = TakeRange(*b, req.size, req.alignment)) {
        *offset = *off;
        return b.get();
      }
    }
    absl::StatusOr<MemoryBlock*> b =
        NewBlock(type, block_size, /*dedicated=*/false, map, name, bytes);
    if (!b.ok()) {
      // Memory too tight for a whole block: an exact-size dedicated one may still fit.
      b = NewBlock(type, req.size, /*dedicated=*/true, map, name, bytes);
    }
    if (!b.ok()) {
      last_error = b.status();
      continue;
    }
    (*b)->kind = kind;
    *offset = *TakeRange(**b, req.size, req.alignment);
    return *b;
  }
  const Stats s = stats();
  return absl::Status(
      last_error.code(),
      absl::StrFormat("%s; doppler holds %d bytes in %d blocks for %d buffers",
                      last_error.message(), s.block_bytes, s.blocks, s.live_buffers));
}

absl::StatusOr<std::unique_ptr<Buffer>> MemoryAllocator::CreateBuffer(size_t bytes, BufferKind kind,
                                                                      std::string_view name) {
  if (bytes == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("buffer '%s': size is 0", name));
  }
  // Shaders see buffers as arrays of 32-bit words (16-bit values are packed two per word): a size
  // that is not a whole number of words would cut off the last packed value.
  const size_t requested = bytes;
  bytes = AlignUp(bytes, 4);
  if (bytes > info_.max_storage_buffer_range) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "buffer '%s' of %d bytes exceeds the device's maxStorageBufferRange of %d bytes (%s)", name,
        requested, info_.max_storage_buffer_range, info_.name));
  }
  if (info_.max_memory_allocation_size > 0 && bytes > info_.max_memory_allocation_size) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "buffer '%s' of %d bytes exceeds the device's maxMemoryAllocationSize of %d bytes", name,
        requested, info_.max_memory_allocation_size));
  }

  VkBufferCreateInfo ci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  ci.size = bytes;
  ci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT |
             VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  ci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VkBuffer handle = VK_NULL_HANDLE;
  if (VkResult r = vkCreateBuffer(device_, &ci, nullptr, &handle); r != VK_SUCCESS) {
    return VkFailure("vkCreateBuffer", r, absl::StrFormat("buffer '%s' of %d bytes", name, bytes));
  }
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(device_, handle, &req);

  VkDeviceSize offset = 0;
  absl::StatusOr<MemoryBlock*> block = Reserve(req, kind, name, bytes, &offset);
  if (!block.ok()) {
    vkDestroyBuffer(device_, handle, nullptr);
    return block.status();
  }
  if (VkResult r = vkBindBufferMemory(device_, handle, (*block)->memory, offset); r != VK_SUCCESS) {
    ReturnRange(**block, offset, req.size);
    vkDestroyBuffer(device_, handle, nullptr);
    return VkFailure("vkBindBufferMemory", r, absl::StrFormat("buffer '%s'", name));
  }
  SetObjectName(device_, set_name_, VK_OBJECT_TYPE_BUFFER, reinterpret_cast<uint64_t>(handle),
                name);

  std::unique_ptr<Buffer> buf(new Buffer());
  buf->allocator_ = this;
  buf->buffer_ = handle;
  buf->size_ = bytes;
  buf->kind_ = kind;
  buf->name_ = std::string(name);
  buf->block_ = *block;
  buf->offset_ = offset;
  buf->reserved_ = req.size;
  if ((*block)->mapped != nullptr) buf->mapped_ = static_cast<char*>((*block)->mapped) + offset;
  ++live_buffers_;
  return buf;
}

void MemoryAllocator::Release(Buffer& buf) {
  vkDestroyBuffer(device_, buf.buffer_, nullptr);
  --live_buffers_;
  MemoryBlock* block = buf.block_;
  ReturnRange(*block, buf.offset_, buf.reserved_);
  if (block->used > 0) return;
  // Empty: give the memory back so a rebuilt plan or a freed model does not pin it.
  vkFreeMemory(device_, block->memory, nullptr);
  blocks_.erase(std::find_if(blocks_.begin(), blocks_.end(),
                             [block](const auto& b) { return b.get() == block; }));
}

}  // namespace doppler::vk
