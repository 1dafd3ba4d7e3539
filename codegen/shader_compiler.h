// GLSL 4.60 compute source -> SPIR-V, plus the reflection the Vulkan backend needs to build
// descriptor set layouts and push-constant ranges without being told by hand.
//
// Compilation uses glslang's C++ API, linked statically (Debian 12's shaderc cannot be linked next
// to glslang-dev, see DESIGN.md "Toolchain facts"); this header is the only interface so another
// compiler can replace it. Results are cached on disk (codegen/spirv_cache.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/spirv_cache.h"

namespace doppler::codegen {

struct BindingInfo {
  uint32_t set = 0;
  uint32_t binding = 0;
  enum class Kind { kStorageBuffer, kUniformBuffer } kind = Kind::kStorageBuffer;
  // The block's instance name when the shader declares one (`buffer B { ... } name;`), else the
  // block type name.
  std::string name;
  // True for uniform buffers and for storage buffers whose every member is `readonly`.
  bool read_only = false;
};

struct CompiledShader {
  std::vector<uint32_t> spirv;
  std::vector<BindingInfo> bindings;  // sorted by (set, binding)
  uint32_t push_constant_bytes = 0;   // size of the push-constant block, 0 when there is none
  std::array<uint32_t, 3> local_size{};
};

struct CompileOptions {
  // Target environment Vulkan 1.<minor>; the SPIR-V version follows it
  // (1.0 -> SPIR-V 1.0, 1.1 -> 1.3, 1.2 -> 1.5, 1.3 -> 1.6).
  uint32_t vulkan_minor = 2;
  // Run the SPIRV-Tools optimizer. Off by default: drivers optimise anyway and it costs compile
  // time.
  bool optimize = false;
};

// Compiles `glsl` (a complete compute shader, `#version 460` first) and reflects it. A compile or
// link error is InvalidArgumentError holding glslang's log and the source with line numbers.
// Only storage and uniform buffers are supported resources; anything else is InvalidArgumentError.
// Thread-safe.
absl::StatusOr<CompiledShader> CompileComputeShader(std::string_view glsl,
                                                    const CompileOptions& opts = {});

// The disk-cache key of (glsl, opts): tests use it with ShaderCacheEntryPath to find the entry.
uint64_t ShaderCacheKey(std::string_view glsl, const CompileOptions& opts);

// Fills bindings, push_constant_bytes and local_size from shader.spirv (SPIRV-Cross).
absl::Status ReflectComputeShader(CompiledShader& shader);

}  // namespace doppler::codegen
