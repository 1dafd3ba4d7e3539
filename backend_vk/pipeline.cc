#include "backend_vk/pipeline.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "backend_vk/context.h"
#include "backend_vk/vk_util.h"

namespace doppler::vk {
namespace {

using codegen::BindingInfo;

// Pools are sized for a whole plan's worth of small sets; a plan with more simply adds a pool.
constexpr uint32_t kSetsPerPool = 256;
constexpr uint32_t kStoragePerSet = 8;
constexpr uint32_t kUniformPerSet = 2;

VkDescriptorType DescriptorType(BindingInfo::Kind k) {
  return k == BindingInfo::Kind::kStorageBuffer ? VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
                                                : VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER;
}

bool IsPowerOfTwo(uint32_t v) { return v != 0 && (v & (v - 1)) == 0; }

absl::Status CheckShaderFits(const codegen::CompiledShader& shader, std::string_view name,
                             const PipelineOptions& opts, const DeviceInfo& info) {
  if (shader.spirv.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("pipeline '%s': empty SPIR-V", name));
  }
  for (const BindingInfo& b : shader.bindings) {
    if (b.set != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("pipeline '%s': binding '%s' is in set %d; only set 0 is supported", name,
                          b.name, b.set));
    }
  }
  uint64_t invocations = 1;
  for (int i = 0; i < 3; ++i) {
    if (shader.local_size[i] == 0 || shader.local_size[i] > info.max_workgroup_size[i]) {
      return absl::InvalidArgumentError(
          absl::StrFormat("pipeline '%s': local_size[%d] = %d is outside [1, %d] on %s", name, i,
                          shader.local_size[i], info.max_workgroup_size[i], info.name));
    }
    invocations *= shader.local_size[i];
  }
  if (invocations > info.max_workgroup_invocations) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pipeline '%s': workgroup of %d invocations exceeds the device's %d", name,
                        invocations, info.max_workgroup_invocations));
  }
  if (shader.push_constant_bytes > info.max_push_constant_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pipeline '%s': %d bytes of push constants exceed the device's %d", name,
                        shader.push_constant_bytes, info.max_push_constant_bytes));
  }
  if (opts.required_subgroup_size != 0) {
    const uint32_t s = opts.required_subgroup_size;
    if (!info.subgroup_size_control || !IsPowerOfTwo(s) || s < info.min_subgroup_size ||
        s > info.max_subgroup_size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "pipeline '%s': subgroup size %d cannot be required on %s (control %s, range %d-%d)",
          name, s, info.name, info.subgroup_size_control ? "yes" : "no", info.min_subgroup_size,
          info.max_subgroup_size));
    }
  }
  if (opts.full_subgroups) {
    const uint32_t s =
        opts.required_subgroup_size ? opts.required_subgroup_size : info.max_subgroup_size;
    if (!info.full_subgroups || shader.local_size[0] % s != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "pipeline '%s': full subgroups need device support (%s) and local_size.x (%d) a "
          "multiple of the subgroup size %d",
          name, info.full_subgroups ? "yes" : "no", shader.local_size[0], s));
    }
  }
  return absl::OkStatus();
}

}  // namespace

ComputePipeline::~ComputePipeline() {
  if (pipeline_ != VK_NULL_HANDLE) vkDestroyPipeline(device_, pipeline_, nullptr);
  if (layout_ != VK_NULL_HANDLE) vkDestroyPipelineLayout(device_, layout_, nullptr);
  if (set_layout_ != VK_NULL_HANDLE) vkDestroyDescriptorSetLayout(device_, set_layout_, nullptr);
}

namespace {

// The driver's statistics of executable 0 (the compute shader), as name/value text.
std::vector<std::pair<std::string, std::string>> PipelineStatistics(VkDevice device, VkPipeline pipeline) {
  auto get = reinterpret_cast<PFN_vkGetPipelineExecutableStatisticsKHR>(
      vkGetDeviceProcAddr(device, "vkGetPipelineExecutableStatisticsKHR"));
  std::vector<std::pair<std::string, std::string>> out;
  if (get == nullptr) return out;
  VkPipelineExecutableInfoKHR info{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR};
  info.pipeline = pipeline;
  info.executableIndex = 0;
  uint32_t n = 0;
  if (get(device, &info, &n, nullptr) != VK_SUCCESS) return out;
  std::vector<VkPipelineExecutableStatisticKHR> stats(n, {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR});
  if (get(device, &info, &n, stats.data()) != VK_SUCCESS) return out;
  for (const VkPipelineExecutableStatisticKHR& s : stats) {
    std::string value;
    switch (s.format) {
      case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: value = s.value.b32 ? "true" : "false"; break;
      case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: value = std::to_string(s.value.i64); break;
      case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: value = std::to_string(s.value.u64); break;
      case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR: value = std::to_string(s.value.f64); break;
      default: continue;
    }
    out.emplace_back(s.name, value);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ComputePipeline>> Context::CreatePipeline(
    const codegen::CompiledShader& shader, std::string_view name, const PipelineOptions& options) {
  if (absl::Status s = CheckShaderFits(shader, name, options, info_); !s.ok()) return s;
  std::unique_ptr<ComputePipeline> p(new ComputePipeline());
  p->device_ = device_;
  p->name_ = std::string(name);
  p->bindings_ = shader.bindings;
  p->push_constant_bytes_ = shader.push_constant_bytes;
  p->local_size_ = shader.local_size;
  const std::string ctx = absl::StrFormat("pipeline '%s'", name);

  std::vector<VkDescriptorSetLayoutBinding> lb;
  for (const BindingInfo& b : shader.bindings) {
    VkDescriptorSetLayoutBinding x{};
    x.binding = b.binding;
    x.descriptorType = DescriptorType(b.kind);
    x.descriptorCount = 1;
    x.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    lb.push_back(x);
  }
  VkDescriptorSetLayoutCreateInfo sci{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  sci.bindingCount = static_cast<uint32_t>(lb.size());
  sci.pBindings = lb.data();
  if (VkResult r = vkCreateDescriptorSetLayout(device_, &sci, nullptr, &p->set_layout_);
      r != VK_SUCCESS) {
    return VkFailure("vkCreateDescriptorSetLayout", r, ctx);
  }

  // Push-constant ranges must be multiples of 4 bytes; reflection gives the declared size.
  VkPushConstantRange push{VK_SHADER_STAGE_COMPUTE_BIT, 0,
                           static_cast<uint32_t>(AlignUp(shader.push_constant_bytes, 4))};
  VkPipelineLayoutCreateInfo lci{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  lci.setLayoutCount = 1;
  lci.pSetLayouts = &p->set_layout_;
  lci.pushConstantRangeCount = shader.push_constant_bytes > 0 ? 1 : 0;
  lci.pPushConstantRanges = &push;
  if (VkResult r = vkCreatePipelineLayout(device_, &lci, nullptr, &p->layout_); r != VK_SUCCESS) {
    return VkFailure("vkCreatePipelineLayout", r, ctx);
  }

  VkShaderModuleCreateInfo mci{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  mci.codeSize = shader.spirv.size() * sizeof(uint32_t);
  mci.pCode = shader.spirv.data();
  VkShaderModule module = VK_NULL_HANDLE;
  if (VkResult r = vkCreateShaderModule(device_, &mci, nullptr, &module); r != VK_SUCCESS) {
    return VkFailure("vkCreateShaderModule", r, ctx);
  }

  VkPipelineShaderStageRequiredSubgroupSizeCreateInfo subgroup{
      VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO};
  subgroup.requiredSubgroupSize = options.required_subgroup_size;
  VkComputePipelineCreateInfo pci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  pci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  pci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  pci.stage.module = module;
  pci.stage.pName = "main";
  if (options.required_subgroup_size != 0) pci.stage.pNext = &subgroup;
  if (options.full_subgroups) {
    pci.stage.flags |= VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT;
  }
  pci.layout = p->layout_;
  if (pipeline_statistics_) pci.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
  const VkResult r =
      vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &pci, nullptr, &p->pipeline_);
  vkDestroyShaderModule(device_, module, nullptr);  // the pipeline keeps what it needs
  if (r != VK_SUCCESS) return VkFailure("vkCreateComputePipelines", r, ctx);
  if (pipeline_statistics_) p->statistics_ = PipelineStatistics(device_, p->pipeline_);

  SetDebugName(VK_OBJECT_TYPE_PIPELINE, reinterpret_cast<uint64_t>(p->pipeline_), name);
  SetDebugName(VK_OBJECT_TYPE_PIPELINE_LAYOUT, reinterpret_cast<uint64_t>(p->layout_), name);
  SetDebugName(VK_OBJECT_TYPE_DESCRIPTOR_SET_LAYOUT, reinterpret_cast<uint64_t>(p->set_layout_),
               name);
  return p;
}

absl::StatusOr<std::unique_ptr<DescriptorAllocator>> Context::CreateDescriptorAllocator() {
  std::unique_ptr<DescriptorAllocator> d(new DescriptorAllocator(device_, info_, set_name_));
  if (absl::Status s = d->AddPool(); !s.ok()) return s;
  return d;
}

absl::StatusOr<VkDescriptorSet> Context::AllocateDescriptorSet(
    const ComputePipeline& pipeline, std::span<const BufferBinding> bindings,
    std::string_view debug_name) {
  return descriptors_->Allocate(pipeline, bindings, debug_name);
}

DescriptorAllocator::DescriptorAllocator(VkDevice device, const DeviceInfo& info,
                                         PFN_vkSetDebugUtilsObjectNameEXT set_name)
    : device_(device), info_(info), set_name_(set_name) {}

DescriptorAllocator::~DescriptorAllocator() {
  for (VkDescriptorPool p : pools_) vkDestroyDescriptorPool(device_, p, nullptr);
}

absl::Status DescriptorAllocator::AddPool() {
  VkDescriptorPoolSize sizes[2] = {
      {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSetsPerPool * kStoragePerSet},
      {VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER, kSetsPerPool * kUniformPerSet},
  };
  VkDescriptorPoolCreateInfo ci{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  ci.maxSets = kSetsPerPool;
  ci.poolSizeCount = 2;
  ci.pPoolSizes = sizes;
  VkDescriptorPool pool = VK_NULL_HANDLE;
  DOPPLER_VK_CHECK(vkCreateDescriptorPool(device_, &ci, nullptr, &pool));
  pools_.push_back(pool);
  return absl::OkStatus();
}

absl::Status DescriptorAllocator::Reset() {
  for (VkDescriptorPool p : pools_) DOPPLER_VK_CHECK(vkResetDescriptorPool(device_, p, 0));
  current_ = 0;
  sets_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<VkDescriptorSet> DescriptorAllocator::Allocate(
    const ComputePipeline& pipeline, std::span<const BufferBinding> bindings,
    std::string_view debug_name) {
  const std::string& pname = pipeline.name();
  // Match given bindings to the reflected ones: each exactly once, nothing unknown.
  for (const BufferBinding& given : bindings) {
    const auto& declared = pipeline.bindings();
    if (std::none_of(declared.begin(), declared.end(),
                     [&](const BindingInfo& b) { return b.binding == given.binding; })) {
      return absl::InvalidArgumentError(
          absl::StrFormat("pipeline '%s' declares no binding %d", pname, given.binding));
    }
  }
  std::vector<VkDescriptorBufferInfo> infos(pipeline.bindings().size());
  std::vector<VkWriteDescriptorSet> writes(pipeline.bindings().size());
  for (size_t i = 0; i < pipeline.bindings().size(); ++i) {
    const BindingInfo& decl = pipeline.bindings()[i];
    const BufferBinding* found = nullptr;
    for (const BufferBinding& given : bindings) {
      if (given.binding != decl.binding) continue;
      if (found != nullptr) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "pipeline '%s': binding %d ('%s') is given twice", pname, decl.binding, decl.name));
      }
      found = &given;
    }
    if (found == nullptr || found->buffer == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "pipeline '%s': binding %d ('%s') has no buffer", pname, decl.binding, decl.name));
    }
    const Buffer& buf = *found->buffer;
    const bool storage = decl.kind == BindingInfo::Kind::kStorageBuffer;
    const uint64_t align = storage ? info_.min_storage_buffer_offset_alignment
                                   : info_.min_uniform_buffer_offset_alignment;
    const uint64_t max_range =
        storage ? info_.max_storage_buffer_range : info_.max_uniform_buffer_range;
    if (found->offset >= buf.size() || (align > 0 && found->offset % align != 0)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "pipeline '%s': binding %d ('%s'): offset %d into buffer '%s' of %d bytes is out of "
          "range or not a multiple of %d",
          pname, decl.binding, decl.name, found->offset, buf.name(), buf.size(), align));
    }
    const uint64_t range =
        found->range == VK_WHOLE_SIZE ? buf.size() - found->offset : found->range;
    if (range == 0 || range > buf.size() - found->offset || range > max_range) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "pipeline '%s': binding %d ('%s'): range %d at offset %d does not fit buffer '%s' of "
          "%d bytes or the device's %s buffer range limit of %d",
          pname, decl.binding, decl.name, range, found->offset, buf.name(), buf.size(),
          storage ? "storage" : "uniform", max_range));
    }
    infos[i] = {buf.handle(), found->offset, range};
    writes[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    writes[i].dstBinding = decl.binding;
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = DescriptorType(decl.kind);
    writes[i].pBufferInfo = &infos[i];
  }

  VkDescriptorSetLayout layout = pipeline.set_layout();
  VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  ai.descriptorSetCount = 1;
  ai.pSetLayouts = &layout;
  VkDescriptorSet set = VK_NULL_HANDLE;
  bool in_new_pool = false;
  for (;;) {
    ai.descriptorPool = pools_[current_];
    const VkResult r = vkAllocateDescriptorSets(device_, &ai, &set);
    if (r == VK_SUCCESS) break;
    // A full pool moves on to the next one (adding one at the end); failing in a pool created
    // just now is a real error.
    const bool pool_full = r == VK_ERROR_OUT_OF_POOL_MEMORY || r == VK_ERROR_FRAGMENTED_POOL;
    if (!pool_full || in_new_pool) {
      return VkFailure("vkAllocateDescriptorSets", r, absl::StrFormat("pipeline '%s'", pname));
    }
    if (++current_ == pools_.size()) {
      if (absl::Status s = AddPool(); !s.ok()) return s;
      in_new_pool = true;
    }
  }
  for (VkWriteDescriptorSet& w : writes) w.dstSet = set;
  vkUpdateDescriptorSets(device_, static_cast<uint32_t>(writes.size()), writes.data(), 0, nullptr);
  SetObjectName(device_, set_name_, VK_OBJECT_TYPE_DESCRIPTOR_SET, reinterpret_cast<uint64_t>(set),
                debug_name.empty() ? std::string_view(pname) : debug_name);
  ++sets_;
  return set;
}

}  // namespace doppler::vk
