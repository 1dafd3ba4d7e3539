#include "codegen/shader_compiler.h"

#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "glslang/Public/ResourceLimits.h"
#include "glslang/Public/ShaderLang.h"
#include "glslang/SPIRV/GlslangToSpv.h"
#include "glslang/build_info.h"

namespace doppler::codegen {
namespace {

// Bump when anything that changes the produced SPIR-V changes outside the source text (compiler
// flags, message options): old cache entries then simply stop matching.
constexpr std::string_view kCacheFormat = "doppler-spirv-v1";

// glslang keeps process-wide state (symbol tables, pool allocators) behind InitializeProcess, and
// its thread-safety across concurrent compiles has varied between releases; one compile at a time
// is cheap insurance, and cache hits never take the lock.
std::mutex& GlslangMutex() {
  static std::mutex m;
  return m;
}

void InitGlslangOnce() {
  static std::once_flag once;
  std::call_once(once, [] { glslang::InitializeProcess(); });
}

std::string NumberedSource(std::string_view glsl) {
  std::string out;
  int line = 1;
  // Debian's abseil has its own absl::string_view, distinct from std::string_view.
  if (!glsl.empty() && glsl.back() == '\n') glsl.remove_suffix(1);
  for (absl::string_view l : absl::StrSplit(absl::string_view(glsl.data(), glsl.size()), '\n')) {
    absl::StrAppendFormat(&out, "%5d | %s\n", line++, l);
  }
  return out;
}

absl::Status CompileError(std::string_view stage, std::string_view log, std::string_view glsl) {
  return absl::InvalidArgumentError(
      absl::StrFormat("GLSL %s failed:\n%s\n--- shader source ---\n%s", stage,
                      absl::StripTrailingAsciiWhitespace(absl::string_view(log.data(), log.size())),
                      NumberedSource(glsl)));
}

struct Targets {
  glslang::EShTargetClientVersion client;
  glslang::EShTargetLanguageVersion spirv;
};

absl::StatusOr<Targets> TargetsFor(uint32_t vulkan_minor) {
  switch (vulkan_minor) {
    case 0: return Targets{glslang::EShTargetVulkan_1_0, glslang::EShTargetSpv_1_0};
    case 1: return Targets{glslang::EShTargetVulkan_1_1, glslang::EShTargetSpv_1_3};
    case 2: return Targets{glslang::EShTargetVulkan_1_2, glslang::EShTargetSpv_1_5};
    case 3: return Targets{glslang::EShTargetVulkan_1_3, glslang::EShTargetSpv_1_6};
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported target Vulkan 1.", vulkan_minor,
                                                 " (glslang ", GLSLANG_VERSION_MAJOR,
                                                 " knows 1.0 to 1.3)"));
}

absl::StatusOr<std::vector<uint32_t>> CompileWithGlslang(std::string_view glsl,
                                                         const CompileOptions& opts) {
  absl::StatusOr<Targets> targets = TargetsFor(opts.vulkan_minor);
  if (!targets.ok()) return targets.status();
  InitGlslangOnce();
  std::lock_guard<std::mutex> lock(GlslangMutex());

  glslang::TShader shader(EShLangCompute);
  const char* text = glsl.data();
  const int length = static_cast<int>(glsl.size());
  shader.setStringsWithLengths(&text, &length, 1);
  shader.setEntryPoint("main");
  shader.setEnvInput(glslang::EShSourceGlsl, EShLangCompute, glslang::EShClientVulkan, 100);
  shader.setEnvClient(glslang::EShClientVulkan, targets->client);
  shader.setEnvTarget(glslang::EShTargetSpv, targets->spirv);
  const auto messages = static_cast<EShMessages>(EShMsgSpvRules | EShMsgVulkanRules);
  if (!shader.parse(GetDefaultResources(), 460, false, messages)) {
    return CompileError("compile", shader.getInfoLog(), glsl);
  }

  glslang::TProgram program;
  program.addShader(&shader);
  if (!program.link(messages)) {
    return CompileError("link", absl::StrCat(shader.getInfoLog(), program.getInfoLog()), glsl);
  }

  std::vector<uint32_t> spirv;
  spv::SpvBuildLogger logger;
  glslang::SpvOptions spv_opts;
  spv_opts.disableOptimizer = !opts.optimize;
  glslang::GlslangToSpv(*program.getIntermediate(EShLangCompute), spirv, &logger, &spv_opts);
  if (spirv.empty()) return CompileError("SPIR-V generation", logger.getAllMessages(), glsl);
  return spirv;
}

}  // namespace

uint64_t ShaderCacheKey(std::string_view glsl, const CompileOptions& opts) {
  // Everything that determines the bytes: our format, the compiler version, the options, the text.
  const std::string prefix =
      absl::StrFormat("%s|glslang %d.%d.%d%s|vk1.%d|opt%d|", kCacheFormat, GLSLANG_VERSION_MAJOR,
                      GLSLANG_VERSION_MINOR, GLSLANG_VERSION_PATCH, GLSLANG_VERSION_FLAVOR,
                      opts.vulkan_minor, opts.optimize ? 1 : 0);
  return Fnv1a64(glsl, Fnv1a64(prefix));
}

absl::StatusOr<CompiledShader> CompileComputeShader(std::string_view glsl,
                                                    const CompileOptions& opts) {
  const uint64_t key = ShaderCacheKey(glsl, opts);
  CompiledShader shader;
  if (std::optional<std::vector<uint32_t>> cached = LoadCachedSpirv(key)) {
    shader.spirv = std::move(*cached);
    // A cached entry that passes the integrity checks but cannot be reflected is treated like a
    // corrupt one: fall through and recompile.
    if (ReflectComputeShader(shader).ok()) {
      CountShaderCacheHit();
      return shader;
    }
    shader = CompiledShader{};
  }

  CountShaderCacheMiss();
  absl::StatusOr<std::vector<uint32_t>> spirv = CompileWithGlslang(glsl, opts);
  if (!spirv.ok()) return spirv.status();
  shader.spirv = std::move(*spirv);
  if (absl::Status s = ReflectComputeShader(shader); !s.ok()) return s;
  StoreCachedSpirv(key, shader.spirv);
  return shader;
}

}  // namespace doppler::codegen
