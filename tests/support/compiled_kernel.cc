#include "tests/support/compiled_kernel.h"

#include <map>

#include "absl/strings/str_cat.h"

namespace doppler::test {

codegen::TargetCaps NvidiaCoopCaps() {
  codegen::TargetCaps caps;
  caps.subgroup_size = 32;
  caps.min_subgroup_size = 32;
  caps.subgroup_arithmetic = true;
  caps.coop_matrix_nv = true;
  caps.max_shared_memory = 49152;
  caps.max_workgroup_invocations = 1024;
  return caps;
}

absl::StatusOr<CompiledKernel> EmitAndCompile(const graph::Graph& g, const graph::Node& n,
                                              const codegen::TargetCaps& caps, int64_t tokens) {
  absl::StatusOr<codegen::Kernel> k = codegen::EmitKernel(g, n, caps, tokens);
  if (!k.ok()) return k.status();
  absl::StatusOr<codegen::CompiledShader> spirv = codegen::CompileComputeShader(k->glsl, {});
  if (!spirv.ok()) return absl::InternalError(absl::StrCat(k->variant, ": ", spirv.status().message()));
  return CompiledKernel{*std::move(k), *std::move(spirv)};
}

absl::StatusOr<uint64_t> SharedMemoryBytes(const std::vector<uint32_t>& spirv) {
  // Opcodes and the storage class, from the SPIR-V specification.
  enum : uint32_t {
    kTypeBool = 20, kTypeInt = 21, kTypeFloat = 22, kTypeVector = 23, kTypeMatrix = 24, kTypeArray = 28,
    kTypeStruct = 30, kTypePointer = 32, kConstant = 43, kSpecConstant = 50, kVariable = 59, kWorkgroup = 4
  };
  std::map<uint32_t, uint64_t> size;      // type id -> bytes
  std::map<uint32_t, uint32_t> constant;  // id -> its first word
  std::map<uint32_t, uint32_t> pointee;   // Workgroup pointer type id -> the type it points to
  uint64_t total = 0;
  constexpr size_t kHeaderWords = 5;
  for (size_t i = kHeaderWords; i < spirv.size();) {
    const uint32_t op = spirv[i] & 0xffff, words = spirv[i] >> 16;
    if (words == 0 || i + words > spirv.size()) return absl::InvalidArgumentError("malformed SPIR-V");
    const uint32_t* a = &spirv[i + 1];
    auto sized = [&](uint32_t id) { return size.count(id) != 0; };
    switch (op) {
      case kTypeBool: size[a[0]] = 4; break;
      case kTypeInt:
      case kTypeFloat: size[a[0]] = a[1] / 8; break;
      // Types built of unsized ones (a storage buffer's runtime array) stay unsized.
      case kTypeVector:
      case kTypeMatrix:
        if (sized(a[1])) size[a[0]] = size[a[1]] * a[2];
        break;
      case kTypeArray:
        if (sized(a[1]) && constant.count(a[2]) != 0) size[a[0]] = size[a[1]] * constant[a[2]];
        break;
      case kTypeStruct: {
        uint64_t bytes = 0;
        bool all = true;
        for (uint32_t m = 1; m + 1 < words; ++m) {
          all = all && sized(a[m]);
          if (all) bytes += size[a[m]];
        }
        if (all) size[a[0]] = bytes;
        break;
      }
      case kTypePointer:
        if (a[1] == kWorkgroup) pointee[a[0]] = a[2];
        break;
      case kConstant:
      case kSpecConstant: constant[a[1]] = a[2]; break;
      case kVariable:
        if (a[2] == kWorkgroup) {
          auto type = pointee.find(a[0]);
          if (type == pointee.end()) return absl::InvalidArgumentError("SPIR-V shared variable of no pointer type");
          if (!sized(type->second)) {
            return absl::InvalidArgumentError(absl::StrCat("SPIR-V shared variable %", a[1], ": a type of no size"));
          }
          total += size[type->second];
        }
        break;
      default: break;
    }
    i += words;
  }
  return total;
}

}  // namespace doppler::test
