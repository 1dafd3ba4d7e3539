#include "codegen/shader_compiler.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace doppler::codegen {
namespace {

using ::testing::HasSubstr;

constexpr char kThreeBuffers[] = R"(#version 460
layout(local_size_x = 64, local_size_y = 2, local_size_z = 1) in;
layout(set = 0, binding = 0) readonly buffer A { float a[]; } in_a;
layout(set = 0, binding = 2) writeonly buffer C { float c[]; } out_c;
layout(set = 0, binding = 1) readonly buffer B { float b[]; };
layout(push_constant) uniform Params { uint n; float scale; uint pad[2]; } params;
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i < params.n) out_c.c[i] = (in_a.a[i] + b[i]) * params.scale;
}
)";

// Points the SPIR-V cache at a fresh directory for one test, and restores the environment after.
class ScopedCacheDir {
 public:
  ScopedCacheDir() {
    if (const char* old = getenv("XDG_CACHE_HOME")) old_xdg_ = old;
    if (const char* old = getenv("DOPPLER_NO_SHADER_CACHE")) old_no_cache_ = old;
    char tmpl[] = "/tmp/doppler_cache_test_XXXXXX";
    dir_ = mkdtemp(tmpl);
    setenv("XDG_CACHE_HOME", dir_.c_str(), 1);
    unsetenv("DOPPLER_NO_SHADER_CACHE");
  }
  ~ScopedCacheDir() {
    if (old_xdg_)
      setenv("XDG_CACHE_HOME", old_xdg_->c_str(), 1);
    else
      unsetenv("XDG_CACHE_HOME");
    if (old_no_cache_)
      setenv("DOPPLER_NO_SHADER_CACHE", old_no_cache_->c_str(), 1);
    else
      unsetenv("DOPPLER_NO_SHADER_CACHE");
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::optional<std::string> old_xdg_, old_no_cache_;
};

TEST(ShaderCompilerTest, ReflectsBindingsPushConstantsAndLocalSize) {
  ScopedCacheDir cache;
  absl::StatusOr<CompiledShader> s = CompileComputeShader(kThreeBuffers);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->spirv.at(0), 0x07230203u);
  ASSERT_EQ(s->bindings.size(), 3u);
  EXPECT_EQ(s->bindings[0].binding, 0u);
  EXPECT_EQ(s->bindings[0].name, "in_a");
  EXPECT_TRUE(s->bindings[0].read_only);
  EXPECT_EQ(s->bindings[1].binding, 1u);
  EXPECT_EQ(s->bindings[1].name, "B");  // no instance name: the block name
  EXPECT_TRUE(s->bindings[1].read_only);
  EXPECT_EQ(s->bindings[2].binding, 2u);
  EXPECT_EQ(s->bindings[2].name, "out_c");
  EXPECT_FALSE(s->bindings[2].read_only);
  for (const BindingInfo& b : s->bindings) {
    EXPECT_EQ(b.set, 0u);
    EXPECT_EQ(b.kind, BindingInfo::Kind::kStorageBuffer);
  }
  EXPECT_EQ(s->push_constant_bytes, 16u);
  EXPECT_EQ(s->local_size, (std::array<uint32_t, 3>{64, 2, 1}));
}

TEST(ShaderCompilerTest, ReflectsUniformBufferAndNoPushConstants) {
  ScopedCacheDir cache;
  absl::StatusOr<CompiledShader> s = CompileComputeShader(R"(#version 460
layout(local_size_x = 8) in;
layout(binding = 3) uniform Step { uint pos; } step;
layout(binding = 0) buffer Out { uint v[]; } out_v;
void main() { out_v.v[gl_LocalInvocationIndex] = step.pos; }
)");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->bindings.size(), 2u);
  EXPECT_EQ(s->bindings[0].binding, 0u);
  EXPECT_EQ(s->bindings[0].kind, BindingInfo::Kind::kStorageBuffer);
  EXPECT_FALSE(s->bindings[0].read_only);
  EXPECT_EQ(s->bindings[1].binding, 3u);
  EXPECT_EQ(s->bindings[1].kind, BindingInfo::Kind::kUniformBuffer);
  EXPECT_TRUE(s->bindings[1].read_only);
  EXPECT_EQ(s->push_constant_bytes, 0u);
  EXPECT_EQ(s->local_size, (std::array<uint32_t, 3>{8, 1, 1}));
}

// Views of one buffer in different element types share a binding, listed once, read-only only
// where every view is; a storage block sharing a binding with a uniform block is an error.
TEST(ShaderCompilerTest, ViewsShareABinding) {
  ScopedCacheDir cache;
  absl::StatusOr<CompiledShader> s = CompileComputeShader(R"(#version 460
layout(local_size_x = 8) in;
layout(binding = 0) buffer Out { uint v[]; } out_v;
layout(binding = 1) readonly buffer W { uint w[]; };
layout(binding = 1) readonly buffer W4 { uvec4 w4[]; };
void main() { out_v.v[gl_LocalInvocationIndex] = w[gl_LocalInvocationIndex] + w4[gl_LocalInvocationIndex].y; }
)");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->bindings.size(), 2u);
  EXPECT_EQ(s->bindings[1].binding, 1u);
  EXPECT_TRUE(s->bindings[1].read_only);

  absl::StatusOr<CompiledShader> writable = CompileComputeShader(R"(#version 460
layout(local_size_x = 8) in;
layout(binding = 0) buffer Out { uint v[]; } out_v;
layout(binding = 0) readonly buffer In { uvec4 v4[]; };
void main() { out_v.v[gl_LocalInvocationIndex] = v4[0].x; }
)");
  ASSERT_TRUE(writable.ok()) << writable.status();
  ASSERT_EQ(writable->bindings.size(), 1u);
  EXPECT_FALSE(writable->bindings[0].read_only);

  absl::StatusOr<CompiledShader> mixed = CompileComputeShader(R"(#version 460
layout(local_size_x = 8) in;
layout(binding = 0) buffer Out { uint v[]; } out_v;
layout(binding = 0) uniform U { uint u; };
void main() { out_v.v[gl_LocalInvocationIndex] = u; }
)");
  ASSERT_FALSE(mixed.ok());
  EXPECT_THAT(std::string(mixed.status().message()), HasSubstr("share set 0 binding 0"));
}

TEST(ShaderCompilerTest, SyntaxErrorCarriesLogAndNumberedSource) {
  ScopedCacheDir cache;
  absl::StatusOr<CompiledShader> s = CompileComputeShader(
      "#version 460\nlayout(local_size_x = 1) in;\nvoid main() {\n  float x = ;\n}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(s.status().message());
  EXPECT_THAT(msg, HasSubstr("ERROR"));              // glslang's info log
  EXPECT_THAT(msg, HasSubstr("4 |   float x = ;"));  // the numbered offending line
  EXPECT_THAT(msg, HasSubstr("1 | #version 460"));
}

TEST(ShaderCompilerTest, RejectsImagesAndUnknownTargets) {
  ScopedCacheDir cache;
  absl::StatusOr<CompiledShader> img = CompileComputeShader(R"(#version 460
layout(local_size_x = 1) in;
layout(binding = 0, r32f) uniform image2D img;
void main() { imageStore(img, ivec2(0), vec4(1)); }
)");
  ASSERT_FALSE(img.ok());
  EXPECT_THAT(std::string(img.status().message()), HasSubstr("storage images"));

  CompileOptions opts;
  opts.vulkan_minor = 9;
  EXPECT_FALSE(CompileComputeShader(kThreeBuffers, opts).ok());
}

TEST(ShaderCompilerTest, OptimizedCompileStillReflects) {
  ScopedCacheDir cache;
  CompileOptions opts;
  opts.optimize = true;
  opts.vulkan_minor = 3;
  absl::StatusOr<CompiledShader> s = CompileComputeShader(kThreeBuffers, opts);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->bindings.size(), 3u);
  EXPECT_EQ(s->push_constant_bytes, 16u);
}

TEST(ShaderCacheTest, Fnv1aIsTheStandardFunction) {
  // Pinned so cache keys never silently change between builds.
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ull);
}

TEST(ShaderCacheTest, SecondCompileHitsAndCorruptEntryIsRecompiled) {
  ScopedCacheDir cache;
  const uint64_t key = ShaderCacheKey(kThreeBuffers, {});
  std::optional<std::string> path = ShaderCacheEntryPath(key);
  ASSERT_TRUE(path.has_value());
  EXPECT_EQ(path->rfind(cache.dir(), 0), 0u) << *path;

  ResetShaderCacheStats();
  absl::StatusOr<CompiledShader> first = CompileComputeShader(kThreeBuffers);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(GetShaderCacheStats().misses, 1u);
  EXPECT_EQ(GetShaderCacheStats().hits, 0u);
  ASSERT_TRUE(std::filesystem::exists(*path));

  absl::StatusOr<CompiledShader> second = CompileComputeShader(kThreeBuffers);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(GetShaderCacheStats().hits, 1u);
  EXPECT_EQ(second->spirv, first->spirv);
  EXPECT_EQ(second->bindings.size(), 3u);  // reflection runs on cached SPIR-V too
  EXPECT_EQ(second->push_constant_bytes, 16u);

  // Different options are a different entry.
  CompileOptions other;
  other.vulkan_minor = 1;
  EXPECT_NE(ShaderCacheKey(kThreeBuffers, other), key);

  // Flip bytes in the middle of the payload: the entry must be rejected and recompiled.
  {
    std::fstream f(*path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64);
    f.write("garbage!", 8);
  }
  absl::StatusOr<CompiledShader> third = CompileComputeShader(kThreeBuffers);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(GetShaderCacheStats().misses, 2u);
  EXPECT_EQ(third->spirv, first->spirv);

  // Truncated to a few bytes: also a miss, and the rewritten entry then hits again.
  std::filesystem::resize_file(*path, 5);
  ASSERT_TRUE(CompileComputeShader(kThreeBuffers).ok());
  EXPECT_EQ(GetShaderCacheStats().misses, 3u);
  ASSERT_TRUE(CompileComputeShader(kThreeBuffers).ok());
  EXPECT_EQ(GetShaderCacheStats().hits, 2u);
}

TEST(ShaderCacheTest, UnwritableCacheDoesNotFailCompilation) {
  ScopedCacheDir cache;
  // A regular file where the cache directory should be: every write fails.
  const std::string blocker = cache.dir() + "/doppler";
  std::ofstream(blocker) << "x";
  ResetShaderCacheStats();
  ASSERT_TRUE(CompileComputeShader(kThreeBuffers).ok());
  ASSERT_TRUE(CompileComputeShader(kThreeBuffers).ok());
  EXPECT_EQ(GetShaderCacheStats().misses, 2u);
}

TEST(ShaderCacheTest, EnvironmentDisablesCache) {
  ScopedCacheDir cache;
  setenv("DOPPLER_NO_SHADER_CACHE", "1", 1);
  EXPECT_FALSE(ShaderCacheDir().has_value());
  ResetShaderCacheStats();
  ASSERT_TRUE(CompileComputeShader(kThreeBuffers).ok());
  ASSERT_TRUE(CompileComputeShader(kThreeBuffers).ok());
  EXPECT_EQ(GetShaderCacheStats().hits, 0u);
  EXPECT_EQ(GetShaderCacheStats().misses, 2u);
  EXPECT_FALSE(std::filesystem::exists(cache.dir() + "/doppler"));
}

}  // namespace
}  // namespace doppler::codegen
