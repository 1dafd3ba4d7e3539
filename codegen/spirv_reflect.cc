// Reflection of compute SPIR-V with SPIRV-Cross (and, for modules it cannot parse, from the
// module's declarations).
//
// Why the C++ API and not spvc_*: Debian 12's static libspirv-cross-c.a is built with the HLSL, MSL
// and C++ backends, so it cannot link against only the core/glsl/reflect libraries the build names.
// The C++ API lives entirely in libspirv-cross-core. It reports malformed input by throwing
// spirv_cross::CompilerError; this file is the one place that catches, turning it into a Status.
#include <algorithm>
#include <exception>
#include <map>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/shader_compiler.h"
#include "spirv_cross/spirv_cross.hpp"

namespace doppler::codegen {
namespace {

// Sorts bindings by (set, binding). Storage blocks may share a binding: views of one buffer in
// different element types (a weight read both as 16-byte vectors and as words, codegen/glsl_common.h
// WeightRowsBuffer; a KV cache read as quads and written as words), listed once, read-only where
// every view is; any other sharing is an error.
absl::Status SortAndMergeBindings(std::vector<BindingInfo>& bindings) {
  std::sort(bindings.begin(), bindings.end(), [](const BindingInfo& a, const BindingInfo& b) {
    return std::tie(a.set, a.binding) < std::tie(b.set, b.binding);
  });
  for (size_t i = 1; i < bindings.size();) {
    const BindingInfo& a = bindings[i - 1];
    const BindingInfo& b = bindings[i];
    if (a.set != b.set || a.binding != b.binding) {
      ++i;
    } else if (a.kind == BindingInfo::Kind::kStorageBuffer && b.kind == a.kind) {
      bindings[i - 1].read_only = a.read_only && b.read_only;
      bindings.erase(bindings.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      return absl::InvalidArgumentError(absl::StrCat("bindings ", a.name, " and ", b.name, " share set ", a.set,
                                                     " binding ", a.binding));
    }
  }
  return absl::OkStatus();
}

absl::Status ReflectOrThrow(CompiledShader& shader) {
  spirv_cross::Compiler compiler(shader.spirv);

  bool has_compute = false;
  for (const spirv_cross::EntryPoint& ep : compiler.get_entry_points_and_stages()) {
    has_compute |= ep.execution_model == spv::ExecutionModelGLCompute;
  }
  if (!has_compute) return absl::InvalidArgumentError("SPIR-V has no GLCompute entry point");

  const spirv_cross::ShaderResources res = compiler.get_shader_resources();
  auto unsupported = [](const char* what, const auto& list) -> absl::Status {
    if (list.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("shader declares ", what, " (", list[0].name,
                     "); the Vulkan backend binds storage and uniform buffers only"));
  };
  for (const absl::Status& s : {unsupported("storage images", res.storage_images),
                                unsupported("sampled images", res.sampled_images),
                                unsupported("separate images", res.separate_images),
                                unsupported("separate samplers", res.separate_samplers),
                                unsupported("atomic counters", res.atomic_counters),
                                unsupported("acceleration structures", res.acceleration_structures),
                                unsupported("subpass inputs", res.subpass_inputs)}) {
    if (!s.ok()) return s;
  }

  shader.bindings.clear();
  auto add = [&](const spirv_cross::Resource& r, BindingInfo::Kind kind) {
    BindingInfo b;
    b.set = compiler.get_decoration(r.id, spv::DecorationDescriptorSet);
    b.binding = compiler.get_decoration(r.id, spv::DecorationBinding);
    b.kind = kind;
    const std::string& instance = compiler.get_name(r.id);
    b.name = instance.empty() ? r.name : instance;
    // glslang puts NonWritable on each member of a `readonly` block; SPIRV-Cross folds member and
    // variable decorations into the block flags.
    b.read_only = kind == BindingInfo::Kind::kUniformBuffer ||
                  compiler.get_buffer_block_flags(r.id).get(spv::DecorationNonWritable);
    shader.bindings.push_back(std::move(b));
  };
  for (const auto& r : res.storage_buffers) add(r, BindingInfo::Kind::kStorageBuffer);
  for (const auto& r : res.uniform_buffers) add(r, BindingInfo::Kind::kUniformBuffer);
  if (absl::Status merged = SortAndMergeBindings(shader.bindings); !merged.ok()) return merged;

  shader.push_constant_bytes = 0;
  for (const auto& r : res.push_constant_buffers) {
    const spirv_cross::SPIRType& type = compiler.get_type(r.base_type_id);
    shader.push_constant_bytes = static_cast<uint32_t>(compiler.get_declared_struct_size(type));
  }

  for (uint32_t i = 0; i < 3; ++i) {
    shader.local_size[i] = compiler.get_execution_mode_argument(spv::ExecutionModeLocalSize, i);
  }
  return absl::OkStatus();
}

// What the backend needs, read straight from the module's declarations: for modules SPIRV-Cross
// cannot parse (Debian 12's does not know VK_NV_cooperative_matrix's instructions). Buffers,
// their bindings and read-only-ness, and the local size; no push constants or images.
absl::Status ReflectDeclarations(CompiledShader& shader) {
  const std::vector<uint32_t>& w = shader.spirv;
  if (w.size() < 5 || w[0] != 0x07230203u) return absl::InvalidArgumentError("not a SPIR-V module");
  struct Struct { uint32_t members = 0, non_writable = 0; bool block = false, buffer_block = false; };
  std::map<uint32_t, Struct> structs;
  std::map<uint32_t, uint32_t> pointee, set_of, binding_of;
  std::map<uint32_t, std::string> names;
  std::vector<std::pair<uint32_t, uint32_t>> variables;  // (id, pointer type)
  std::map<uint32_t, uint32_t> storage_of;
  bool compute = false;
  for (size_t i = 5; i < w.size();) {
    const uint32_t count = w[i] >> 16, op = w[i] & 0xFFFFu;
    if (count == 0 || i + count > w.size()) return absl::InvalidArgumentError("truncated SPIR-V instruction");
    const uint32_t* a = &w[i + 1];
    switch (op) {
      case spv::OpEntryPoint: compute |= a[0] == spv::ExecutionModelGLCompute; break;
      case spv::OpExecutionMode:
        if (a[1] == spv::ExecutionModeLocalSize && count >= 6) shader.local_size = {a[2], a[3], a[4]};
        break;
      case spv::OpName: names[a[0]] = reinterpret_cast<const char*>(&a[1]); break;
      case spv::OpDecorate:
        if (a[1] == spv::DecorationBlock) structs[a[0]].block = true;
        if (a[1] == spv::DecorationBufferBlock) structs[a[0]].buffer_block = true;
        if (a[1] == spv::DecorationDescriptorSet) set_of[a[0]] = a[2];
        if (a[1] == spv::DecorationBinding) binding_of[a[0]] = a[2];
        break;
      case spv::OpMemberDecorate:
        if (a[2] == spv::DecorationNonWritable) ++structs[a[0]].non_writable;
        break;
      case spv::OpTypeStruct: structs[a[0]].members = count - 2; break;
      case spv::OpTypePointer: pointee[a[0]] = a[2]; break;
      case spv::OpVariable:
        storage_of[a[1]] = a[2];
        variables.emplace_back(a[1], a[0]);
        break;
      default: break;
    }
    i += count;
  }
  if (!compute) return absl::InvalidArgumentError("SPIR-V has no GLCompute entry point");
  shader.bindings.clear();
  shader.push_constant_bytes = 0;
  for (const auto& [id, pointer] : variables) {
    const uint32_t storage = storage_of[id];
    if (storage == spv::StorageClassPushConstant || storage == spv::StorageClassUniformConstant) {
      return absl::InvalidArgumentError("push constants and images need SPIRV-Cross reflection");
    }
    if (storage != spv::StorageClassStorageBuffer && storage != spv::StorageClassUniform) continue;
    const uint32_t type = pointee[pointer];
    const Struct& s = structs[type];
    BindingInfo b;
    b.set = set_of[id];
    b.binding = binding_of[id];
    b.kind = storage == spv::StorageClassUniform && !s.buffer_block ? BindingInfo::Kind::kUniformBuffer
                                                                     : BindingInfo::Kind::kStorageBuffer;
    b.name = names[id].empty() ? names[type] : names[id];
    b.read_only = b.kind == BindingInfo::Kind::kUniformBuffer || (s.members > 0 && s.non_writable >= s.members);
    shader.bindings.push_back(std::move(b));
  }
  return SortAndMergeBindings(shader.bindings);
}

}  // namespace

absl::Status ReflectComputeShader(CompiledShader& shader) {
  if (shader.spirv.empty()) return absl::InvalidArgumentError("empty SPIR-V");
  try {
    return ReflectOrThrow(shader);
  } catch (const std::exception& e) {
    // Declarations are enough for what the backend binds; SPIRV-Cross also validates the rest.
    absl::Status fallback = ReflectDeclarations(shader);
    if (fallback.ok()) return fallback;
    return absl::InvalidArgumentError(absl::StrCat("SPIRV-Cross rejected the SPIR-V: ", e.what(), "; ", fallback.message()));
  }
}

}  // namespace doppler::codegen
