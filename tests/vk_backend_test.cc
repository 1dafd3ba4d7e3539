// Vulkan backend on whatever device the machine has (lavapipe in CI), with validation on.
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "backend_vk/context.h"
#include "backend_vk/coop_layout.h"
#include "backend_vk/device_info.h"
#include "backend_vk/plan.h"
#include "codegen/shader_compiler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/vk_test_env.h"

namespace doppler::vk {
namespace {

using ::testing::HasSubstr;

// c[i] = a[i] * scale + b[i] for i < min(n, count); n comes from a push constant fixed at
// recording time, scale and count from a host-visible buffer rewritten before each replay.
constexpr char kAxpy[] = R"(#version 460
layout(local_size_x = 64) in;
layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 1) readonly buffer B { float b[]; };
layout(binding = 2) writeonly buffer C { float c[]; };
layout(binding = 3) readonly buffer Params { float scale; uint count; } params;
layout(push_constant) uniform Push { uint n; } pc;
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i >= pc.n || i >= params.count) return;
  c[i] = a[i] * params.scale + b[i];
}
)";

struct StepParams {
  float scale;
  uint32_t count;
};

codegen::CompiledShader Compile(const char* src) {
  absl::StatusOr<codegen::CompiledShader> s = codegen::CompileComputeShader(src);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : codegen::CompiledShader{};
}

std::unique_ptr<Buffer> MakeBuffer(Context& ctx, size_t bytes, BufferKind kind, const char* name) {
  absl::StatusOr<std::unique_ptr<Buffer>> b = ctx.CreateBuffer(bytes, kind, name);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *std::move(b) : nullptr;
}

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

using VkBackendTest = VkTest;

TEST(DeviceInfoTest, EnumerateFindsADeviceWithSubgroups) {
  absl::StatusOr<std::vector<DeviceInfo>> devices = EnumerateDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_FALSE(devices->empty());
  bool any_cpu = false;
  for (const DeviceInfo& d : *devices) {
    EXPECT_GE(d.subgroup_size, 1u) << d.name;
    EXPECT_GE(d.max_storage_buffer_range, 1u << 20) << d.name;
    EXPECT_THAT(FormatDeviceInfo(d), HasSubstr(d.name));
    EXPECT_EQ(d.device_class, DeviceClassOf(d.vendor_id, d.driver_id)) << d.name;
    EXPECT_EQ(TargetCapsOf(d).device_class, d.device_class) << d.name;
    EXPECT_THAT(FormatDeviceInfo(d),
                HasSubstr(absl::StrCat("device class:      ", codegen::DeviceClassName(d.device_class), "\n")));
    // A device with NV cooperative matrices lists its shapes; the kernels take them only with 16x16x16.
    if (d.coop_matrix_nv && !d.coop_nv_f16_shapes.empty()) {
      EXPECT_THAT(FormatDeviceInfo(d), HasSubstr(absl::StrCat("f16 products in f32: ", d.coop_nv_f16_shapes[0])));
    }
    if (TargetCapsOf(d).coop_matrix_nv) EXPECT_TRUE(absl::c_linear_search(d.coop_nv_f16_shapes, "16x16x16")) << d.name;
    EXPECT_EQ(TargetCapsOf(d).coop_matrix_nv_16x8, TargetCapsOf(d).coop_matrix_nv &&
                                                       absl::c_linear_search(d.coop_nv_f16_shapes, "16x8x16"))
        << d.name;
    if (d.type == "CPU") {
      any_cpu = true;
      EXPECT_THAT(d.name, HasSubstr("llvmpipe"));  // lavapipe is the only CPU driver we install
      EXPECT_EQ(d.device_class, codegen::DeviceClass::kLavapipe);
    }
    std::printf("%s", FormatDeviceInfo(d).c_str());
  }
  (void)any_cpu;
}

// Vendor IDs and driver IDs as devices report them (the PCI vendor IDs; Mesa's drivers on their
// vendors' hardware; lavapipe with Mesa's Khronos vendor ID VK_VENDOR_ID_MESA).
TEST(DeviceInfoTest, ClassFromVendorAndDriver) {
  using codegen::DeviceClass;
  EXPECT_EQ(DeviceClassOf(0x10DE, VK_DRIVER_ID_NVIDIA_PROPRIETARY), DeviceClass::kNvidia);
  EXPECT_EQ(DeviceClassOf(0x1002, VK_DRIVER_ID_AMD_PROPRIETARY), DeviceClass::kAmd);
  EXPECT_EQ(DeviceClassOf(0x1002, VK_DRIVER_ID_MESA_RADV), DeviceClass::kAmd);
  EXPECT_EQ(DeviceClassOf(0x1002, VK_DRIVER_ID_AMD_OPEN_SOURCE), DeviceClass::kAmd);
  EXPECT_EQ(DeviceClassOf(0x8086, VK_DRIVER_ID_INTEL_OPEN_SOURCE_MESA), DeviceClass::kIntel);
  EXPECT_EQ(DeviceClassOf(0x8086, VK_DRIVER_ID_INTEL_PROPRIETARY_WINDOWS), DeviceClass::kIntel);
  // llvmpipe is lavapipe whatever vendor ID it reports, Mesa's or a host's.
  EXPECT_EQ(DeviceClassOf(VK_VENDOR_ID_MESA, VK_DRIVER_ID_MESA_LLVMPIPE), DeviceClass::kLavapipe);
  EXPECT_EQ(DeviceClassOf(0x8086, VK_DRIVER_ID_MESA_LLVMPIPE), DeviceClass::kLavapipe);
  // Others: Arm's Mali, Qualcomm's Adreno, Apple's GPUs through MoltenVK, a device that reports no
  // driver properties.
  EXPECT_EQ(DeviceClassOf(0x13B5, VK_DRIVER_ID_ARM_PROPRIETARY), DeviceClass::kGeneric);
  EXPECT_EQ(DeviceClassOf(0x5143, VK_DRIVER_ID_QUALCOMM_PROPRIETARY), DeviceClass::kGeneric);
  EXPECT_EQ(DeviceClassOf(0x106B, VK_DRIVER_ID_MOLTENVK), DeviceClass::kGeneric);
  EXPECT_EQ(DeviceClassOf(0, VkDriverId{}), DeviceClass::kGeneric);
  // A device that reports no driver properties is classed by its vendor.
  EXPECT_EQ(DeviceClassOf(0x10DE, VkDriverId{}), DeviceClass::kNvidia);
}

TEST(DeviceInfoTest, ClassNames) {
  using codegen::DeviceClass;
  EXPECT_STREQ(codegen::DeviceClassName(DeviceClass::kNvidia), "nvidia");
  EXPECT_STREQ(codegen::DeviceClassName(DeviceClass::kAmd), "amd");
  EXPECT_STREQ(codegen::DeviceClassName(DeviceClass::kIntel), "intel");
  EXPECT_STREQ(codegen::DeviceClassName(DeviceClass::kLavapipe), "lavapipe");
  EXPECT_STREQ(codegen::DeviceClassName(DeviceClass::kGeneric), "generic");
}

// The mma layout as NVIDIA's driver keeps a fragment's elements (lane 4g + t: element e of a 16 x C
// fragment at row g + 8 floor(e / (C/4)), column 2t + e % 2 + 8 (floor(e/2) % (C/8))), and tables
// that differ from it.
TEST(CoopLayoutTest, HoldsMmaLayoutReadsTheTable) {
  for (int cols : {8, 16}) {
    std::vector<float> table;
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4, t = lane % 4;
      for (int e = 0; e < cols / 2; ++e) {
        const int row = g + 8 * (e / (cols / 4)), col = 2 * t + e % 2 + 8 * ((e / 2) % (cols / 8));
        table.push_back(static_cast<float>(row * cols + col));
      }
    }
    EXPECT_TRUE(HoldsMmaLayout(table, cols)) << cols;
    std::vector<float> swapped = table;  // two elements of lane 5 the other way round
    std::swap(swapped[5 * cols / 2], swapped[5 * cols / 2 + 1]);
    EXPECT_FALSE(HoldsMmaLayout(swapped, cols)) << cols;
    std::vector<float> unset = table;  // an element no lane holds
    unset[31 * cols / 2 + 1] = -1.0f;
    EXPECT_FALSE(HoldsMmaLayout(unset, cols)) << cols;
    // Row-major in each lane (lane l holding row l / 2's half l % 2) is another layout.
    std::vector<float> row_major(table.size());
    absl::c_iota(row_major, 0.0f);
    EXPECT_FALSE(HoldsMmaLayout(row_major, cols)) << cols;
  }
  EXPECT_FALSE(HoldsMmaLayout(std::vector<float>(100, 0.0f), 16));  // the wrong size
  EXPECT_FALSE(HoldsMmaLayout(std::vector<float>(64, 0.0f), 4));    // a shape it does not describe
}

// The context checks the fragment layout where the device has cooperative matrices (NVIDIA's
// driver keeps the mma layout), and never elsewhere (lavapipe).
TEST_F(VkBackendTest, ContextChecksTheFragmentLayout) {
  const DeviceInfo& info = ctx().info();
  const codegen::TargetCaps caps = TargetCapsOf(info);
  if (!caps.coop_matrix_nv) EXPECT_FALSE(info.coop_fragments_mma) << info.name;
  if (caps.coop_matrix_nv && info.device_class == codegen::DeviceClass::kNvidia) EXPECT_TRUE(info.coop_fragments_mma);
  EXPECT_EQ(caps.coop_fragments_mma, caps.coop_matrix_nv && info.coop_fragments_mma);
  if (!caps.coop_matrix_nv) EXPECT_FALSE(info.coop_accumulators_mma) << info.name;
  if (caps.coop_matrix_nv && info.device_class == codegen::DeviceClass::kNvidia) EXPECT_TRUE(info.coop_accumulators_mma);
  EXPECT_EQ(caps.coop_accumulators_mma, caps.coop_matrix_nv && info.coop_accumulators_mma);
  EXPECT_EQ(ctx().validation_messages(), 0);
}

TEST_F(VkBackendTest, ContextDescribesItsDevice) {
  const DeviceInfo& info = ctx().info();
  EXPECT_TRUE(ctx().validation_enabled());
  EXPECT_FALSE(info.name.empty());
  EXPECT_GE(info.api_version, static_cast<uint32_t>(VK_API_VERSION_1_2));
  EXPECT_TRUE(info.compute_queue_family.has_value());
  EXPECT_GE(info.subgroup_size, 1u);
  EXPECT_NE(ctx().device(), VK_NULL_HANDLE);
}

TEST_F(VkBackendTest, ValidationMessagesAreCounted) {
  // A private context, so the deliberate mistake does not count against the shared one.
  ContextOptions opts;
  opts.validation = true;
  absl::StatusOr<std::unique_ptr<Context>> own = Context::Create(opts);
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ((*own)->validation_messages(), 0);
  // Harmless to the driver, but invalid usage the layer must flag: a wrong sType.
  VkFenceCreateInfo bad{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
  VkFence fence = VK_NULL_HANDLE;
  std::fprintf(stderr, "(the next validation message is expected)\n");
  ASSERT_EQ(vkCreateFence((*own)->device(), &bad, nullptr, &fence), VK_SUCCESS);
  vkDestroyFence((*own)->device(), fence, nullptr);
  EXPECT_GE((*own)->validation_messages(), 1);
}

TEST_F(VkBackendTest, BadDeviceIndexListsDevices) {
  ContextOptions opts;
  opts.device_index = 99;
  absl::StatusOr<std::unique_ptr<Context>> c = Context::Create(opts);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(ctx().info().name));
}

TEST_F(VkBackendTest, ReplayedCommandBufferSeesNewHostParameters) {
  Context& c = ctx();
  constexpr uint32_t kN = 1000003;  // not a multiple of the workgroup size
  const std::vector<float> a = RandomFloats(kN, 1), b = RandomFloats(kN, 2);
  auto buf_a = MakeBuffer(c, kN * 4, BufferKind::kDeviceLocal, "a");
  auto buf_b = MakeBuffer(c, kN * 4, BufferKind::kDeviceLocal, "b");
  auto buf_c = MakeBuffer(c, kN * 4, BufferKind::kDeviceLocal, "c");
  auto params = MakeBuffer(c, sizeof(StepParams), BufferKind::kHostVisible, "params");
  ASSERT_TRUE(buf_a && buf_b && buf_c && params);
  ASSERT_NE(params->mapped(), nullptr);
  ASSERT_TRUE(c.Upload(*buf_a, 0, a.data(), kN * 4).ok());
  ASSERT_TRUE(c.Upload(*buf_b, 0, b.data(), kN * 4).ok());
  ASSERT_TRUE(c.Fill(*buf_c, 0).ok());

  codegen::CompiledShader shader = Compile(kAxpy);
  absl::StatusOr<std::unique_ptr<ComputePipeline>> pipe = c.CreatePipeline(shader, "axpy");
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  const BufferBinding bindings[] = {
      {0, buf_a.get()}, {1, buf_b.get()}, {2, buf_c.get()}, {3, params.get()}};
  absl::StatusOr<VkDescriptorSet> set = c.AllocateDescriptorSet(**pipe, bindings);
  ASSERT_TRUE(set.ok()) << set.status();

  absl::StatusOr<std::unique_ptr<CommandBuffer>> cmd = c.CreateCommandBuffer("axpy step");
  ASSERT_TRUE(cmd.ok()) << cmd.status();
  ASSERT_TRUE((*cmd)->Begin().ok());
  (*cmd)->BindPipeline(**pipe);
  (*cmd)->BindDescriptorSet(*set);
  (*cmd)->PushConstants(&kN, sizeof(kN));
  (*cmd)->Dispatch((kN + 63) / 64);
  ASSERT_TRUE((*cmd)->End().ok());
  EXPECT_EQ((*cmd)->dispatch_count(), 1u);

  // Three replays without re-recording; scales are powers of two so a*s is exact and a fused
  // multiply-add on the device rounds exactly like the host's a*s + b.
  std::vector<float> expected(kN, 0.0f);
  const StepParams steps[] = {{1.0f, kN}, {2.0f, kN}, {0.5f, kN / 2}};
  for (const StepParams& p : steps) {
    std::memcpy(params->mapped(), &p, sizeof(p));
    const uint64_t before = c.submit_count();
    ASSERT_TRUE(c.Submit(**cmd).ok());
    EXPECT_EQ(c.submit_count(), before + 1);
    for (uint32_t i = 0; i < p.count; ++i) expected[i] = a[i] * p.scale + b[i];
    std::vector<float> got(kN);
    ASSERT_TRUE(c.Download(*buf_c, 0, got.data(), kN * 4).ok());
    ASSERT_EQ(std::memcmp(got.data(), expected.data(), kN * 4), 0) << "scale " << p.scale;
  }
}

TEST_F(VkBackendTest, DecodeLoopSubmitsOncePerToken) {
  // A token counter incremented on the GPU and read back through the mapping after each replay.
  Context& c = ctx();
  codegen::CompiledShader shader = Compile(R"(#version 460
layout(local_size_x = 1) in;
layout(binding = 0) buffer State { uint tokens; uint last; } state;
void main() { state.tokens += 1; state.last = state.tokens * 10; }
)");
  auto state = MakeBuffer(c, 8, BufferKind::kHostVisible, "state");
  ASSERT_TRUE(state);
  std::memset(state->mapped(), 0, 8);
  auto pipe = c.CreatePipeline(shader, "count");
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  const BufferBinding bind[] = {{0, state.get()}};
  auto set = c.AllocateDescriptorSet(**pipe, bind);
  ASSERT_TRUE(set.ok()) << set.status();
  auto cmd = c.CreateCommandBuffer("decode");
  ASSERT_TRUE(cmd.ok());
  ASSERT_TRUE((*cmd)->Begin().ok());
  (*cmd)->BindPipeline(**pipe);
  (*cmd)->BindDescriptorSet(*set);
  (*cmd)->Dispatch(1);
  ASSERT_TRUE((*cmd)->End().ok());

  const uint64_t before = c.submit_count();
  for (uint32_t t = 1; t <= 20; ++t) {
    ASSERT_TRUE(c.Submit(**cmd).ok());
    uint32_t got[2];
    std::memcpy(got, state->mapped(), 8);  // readback without any extra submit
    ASSERT_EQ(got[0], t);
    ASSERT_EQ(got[1], t * 10);
  }
  EXPECT_EQ(c.submit_count() - before, 20u);
}

TEST_F(VkBackendTest, LargeBufferRoundTripsThroughStagingChunks) {
  Context& c = ctx();
  // Bigger than the 64 MiB staging buffer, odd-sized, and within lavapipe's 128 MiB range limit.
  const size_t bytes = std::min<size_t>(96u << 20, c.info().max_storage_buffer_range) - 5;
  std::vector<uint8_t> data(bytes);
  std::mt19937 rng(7);
  for (size_t i = 0; i < bytes; i += 4) {
    const uint32_t r = rng();
    std::memcpy(&data[i], &r, std::min<size_t>(4, bytes - i));
  }
  auto buf = MakeBuffer(c, bytes, BufferKind::kDeviceLocal, "large");
  ASSERT_TRUE(buf);
  const uint64_t before = c.submit_count();
  ASSERT_TRUE(c.Upload(*buf, 0, data.data(), bytes).ok());
  EXPECT_GE(c.submit_count() - before, 2u);  // chunked
  std::vector<uint8_t> back(bytes, 0);
  ASSERT_TRUE(c.Download(*buf, 0, back.data(), bytes).ok());
  EXPECT_TRUE(back == data);

  // Partial, unaligned ranges.
  const char msg[] = "doppler!";
  ASSERT_TRUE(c.Upload(*buf, 12345, msg, 7).ok());
  char got[7];
  ASSERT_TRUE(c.Download(*buf, 12345, got, 7).ok());
  EXPECT_EQ(std::memcmp(got, msg, 7), 0);
  uint8_t neighbour;
  ASSERT_TRUE(c.Download(*buf, 12345 + 7, &neighbour, 1).ok());
  EXPECT_EQ(neighbour, data[12345 + 7]);
}

TEST_F(VkBackendTest, FillWritesPattern) {
  Context& c = ctx();
  auto buf = MakeBuffer(c, 4096 + 2, BufferKind::kDeviceLocal, "filled");
  ASSERT_TRUE(buf);
  ASSERT_TRUE(c.Fill(*buf, 0xdeadbeef).ok());
  std::vector<uint32_t> got(1024);
  ASSERT_TRUE(c.Download(*buf, 0, got.data(), 4096).ok());
  for (uint32_t v : got) ASSERT_EQ(v, 0xdeadbeefu);
}

TEST_F(VkBackendTest, BadBufferRequestsAreClearErrors) {
  Context& c = ctx();
  const uint64_t too_big = c.info().max_storage_buffer_range + 1;
  absl::StatusOr<std::unique_ptr<Buffer>> b =
      c.CreateBuffer(too_big, BufferKind::kDeviceLocal, "huge_weights");
  ASSERT_FALSE(b.ok());
  const std::string msg(b.status().message());
  EXPECT_THAT(msg, HasSubstr("huge_weights"));
  EXPECT_THAT(msg, HasSubstr("maxStorageBufferRange"));
  EXPECT_THAT(msg, HasSubstr(std::to_string(too_big)));
  EXPECT_FALSE(c.CreateBuffer(0, BufferKind::kDeviceLocal, "empty").ok());

  auto small = MakeBuffer(c, 16, BufferKind::kDeviceLocal, "small");
  ASSERT_TRUE(small);
  char tmp[32] = {};
  absl::Status up = c.Upload(*small, 8, tmp, 16);
  EXPECT_EQ(up.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(up.message()), HasSubstr("small"));
  EXPECT_EQ(c.Download(*small, 17, tmp, 0).code(), absl::StatusCode::kOutOfRange);
}

TEST_F(VkBackendTest, SmallBuffersShareMemoryBlocks) {
  Context& c = ctx();
  const MemoryAllocator::Stats base = c.memory_stats();
  std::vector<std::unique_ptr<Buffer>> bufs;
  for (int i = 0; i < 200; ++i) {
    bufs.push_back(MakeBuffer(c, 1000 + i * 37, BufferKind::kDeviceLocal, "small"));
    ASSERT_TRUE(bufs.back());
  }
  const MemoryAllocator::Stats mid = c.memory_stats();
  EXPECT_LE(mid.blocks - base.blocks, 1u);
  EXPECT_EQ(mid.live_buffers - base.live_buffers, 200u);
  // Free every other one, then reuse the holes.
  for (size_t i = 0; i < bufs.size(); i += 2) bufs[i].reset();
  for (size_t i = 0; i < bufs.size(); i += 2) {
    bufs[i] = MakeBuffer(c, 900, BufferKind::kDeviceLocal, "again");
  }
  EXPECT_EQ(c.memory_stats().blocks, mid.blocks);
  bufs.clear();
  EXPECT_EQ(c.memory_stats().blocks, base.blocks);
  EXPECT_EQ(c.memory_stats().used_bytes, base.used_bytes);
}

TEST_F(VkBackendTest, DescriptorSetsAreValidated) {
  Context& c = ctx();
  codegen::CompiledShader shader = Compile(kAxpy);
  auto pipe = c.CreatePipeline(shader, "axpy");
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  auto x = MakeBuffer(c, 1024, BufferKind::kDeviceLocal, "x");
  ASSERT_TRUE(x);

  const BufferBinding missing[] = {{0, x.get()}, {1, x.get()}, {2, x.get()}};
  auto s = c.AllocateDescriptorSet(**pipe, missing);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("binding 3"));

  const BufferBinding unknown[] = {
      {0, x.get()}, {1, x.get()}, {2, x.get()}, {3, x.get()}, {7, x.get()}};
  EXPECT_FALSE(c.AllocateDescriptorSet(**pipe, unknown).ok());

  const BufferBinding twice[] = {
      {0, x.get()}, {1, x.get()}, {2, x.get()}, {3, x.get()}, {3, x.get()}};
  EXPECT_FALSE(c.AllocateDescriptorSet(**pipe, twice).ok());

  const BufferBinding too_long[] = {
      {0, x.get(), 0, 2048}, {1, x.get()}, {2, x.get()}, {3, x.get()}};
  EXPECT_FALSE(c.AllocateDescriptorSet(**pipe, too_long).ok());

  if (c.info().min_storage_buffer_offset_alignment > 1) {
    const BufferBinding misaligned[] = {{0, x.get(), 1}, {1, x.get()}, {2, x.get()}, {3, x.get()}};
    EXPECT_FALSE(c.AllocateDescriptorSet(**pipe, misaligned).ok());
  }

  // Sub-ranges at aligned offsets are fine, and pools grow past their first 256 sets.
  auto plan = c.CreateDescriptorAllocator();
  ASSERT_TRUE(plan.ok());
  const size_t off = c.info().min_storage_buffer_offset_alignment;
  const BufferBinding ok[] = {{0, x.get(), off, 256}, {1, x.get()}, {2, x.get()}, {3, x.get()}};
  for (int i = 0; i < 600; ++i) {
    auto set = (*plan)->Allocate(**pipe, ok, "plan set");
    ASSERT_TRUE(set.ok()) << i << ": " << set.status();
  }
  EXPECT_EQ((*plan)->sets_allocated(), 600u);
  ASSERT_TRUE((*plan)->Reset().ok());
  EXPECT_TRUE((*plan)->Allocate(**pipe, ok).ok());
}

TEST_F(VkBackendTest, PipelineRejectsUnsupportedLayouts) {
  Context& c = ctx();
  codegen::CompiledShader shader = Compile(R"(#version 460
layout(local_size_x = 1) in;
layout(set = 1, binding = 0) buffer X { uint x[]; };
void main() { x[0] = 1u; }
)");
  auto pipe = c.CreatePipeline(shader, "set1");
  ASSERT_FALSE(pipe.ok());
  EXPECT_THAT(std::string(pipe.status().message()), HasSubstr("set 1"));

  codegen::CompiledShader wide = Compile(kAxpy);
  wide.local_size = {4096, 4096, 1};  // as if the shader asked for it
  EXPECT_FALSE(c.CreatePipeline(wide, "wide").ok());
}

TEST_F(VkBackendTest, RecordingMistakesSurfaceAtEnd) {
  Context& c = ctx();
  auto cmd = c.CreateCommandBuffer("bad");
  ASSERT_TRUE(cmd.ok());
  EXPECT_FALSE(c.Submit(**cmd).ok());  // never recorded

  ASSERT_TRUE((*cmd)->Begin().ok());
  (*cmd)->Dispatch(1);  // no pipeline bound
  absl::Status s = (*cmd)->End();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(c.Submit(**cmd).ok());

  codegen::CompiledShader shader = Compile(kAxpy);
  auto pipe = c.CreatePipeline(shader, "axpy");
  ASSERT_TRUE(pipe.ok());
  ASSERT_TRUE((*cmd)->Begin().ok());
  (*cmd)->BindPipeline(**pipe);
  const uint32_t too_much[4] = {};
  (*cmd)->PushConstants(too_much, sizeof(too_much));  // the shader has 4 bytes
  EXPECT_EQ((*cmd)->End().code(), absl::StatusCode::kInvalidArgument);

  ASSERT_TRUE((*cmd)->Begin().ok());
  (*cmd)->BindPipeline(**pipe);
  (*cmd)->Dispatch(c.info().max_workgroup_count[0] + 1ull > 0xffffffffull
                       ? 0
                       : c.info().max_workgroup_count[0] + 1);
  EXPECT_EQ((*cmd)->End().code(), absl::StatusCode::kInvalidArgument);

  // Begin twice in a row is allowed: the first recording is abandoned.
  ASSERT_TRUE((*cmd)->Begin().ok());
  ASSERT_TRUE((*cmd)->Begin().ok());
  EXPECT_TRUE((*cmd)->End().ok());
  EXPECT_TRUE(c.Submit(**cmd).ok());
}

TEST_F(VkBackendTest, CopyAndBarriersInsideOneCommandBuffer) {
  // fill -> copy -> dispatch reading the copy -> copy of the result, all in one recording.
  Context& c = ctx();
  codegen::CompiledShader shader = Compile(R"(#version 460
layout(local_size_x = 32) in;
layout(binding = 0) readonly buffer In { uint v[]; } src;
layout(binding = 1) writeonly buffer Out { uint v[]; } dst;
void main() { uint i = gl_GlobalInvocationID.x; if (i < 100u) dst.v[i] = src.v[i] + i; }
)");
  auto pipe = c.CreatePipeline(shader, "add_index");
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  auto a = MakeBuffer(c, 400, BufferKind::kDeviceLocal, "a");
  auto b = MakeBuffer(c, 400, BufferKind::kDeviceLocal, "b");
  auto out = MakeBuffer(c, 400, BufferKind::kDeviceLocal, "out");
  auto host = MakeBuffer(c, 400, BufferKind::kHostVisible, "host");
  ASSERT_TRUE(a && b && out && host);
  const BufferBinding bind[] = {{0, b.get()}, {1, out.get()}};
  auto set = c.AllocateDescriptorSet(**pipe, bind);
  ASSERT_TRUE(set.ok());

  auto cmd = c.CreateCommandBuffer("chain");
  ASSERT_TRUE(cmd.ok());
  ASSERT_TRUE((*cmd)->Begin().ok());
  (*cmd)->FillBuffer(*a, 0, 400, 5);
  (*cmd)->FullBarrier();
  (*cmd)->CopyBuffer(*a, 0, *b, 0, 400);
  (*cmd)->FullBarrier();
  (*cmd)->BindPipeline(**pipe);
  (*cmd)->BindDescriptorSet(*set);
  (*cmd)->Dispatch(4);
  (*cmd)->FullBarrier();
  (*cmd)->CopyBuffer(*out, 0, *host, 0, 400);
  ASSERT_TRUE((*cmd)->End().ok());
  ASSERT_TRUE(c.Submit(**cmd).ok());
  std::vector<uint32_t> got(100);
  std::memcpy(got.data(), host->mapped(), 400);
  for (uint32_t i = 0; i < 100; ++i) ASSERT_EQ(got[i], 5 + i);
}

// A mapped-device buffer (step parameters, token ids) is mapped, coherent both ways: what the
// host writes a kernel reads, and what the kernel writes the host reads, with no copies.
TEST_F(VkBackendTest, MappedDeviceBufferIsReadAndWrittenInPlace) {
  Context& c = ctx();
  codegen::CompiledShader shader = Compile(R"(#version 460
layout(local_size_x = 32) in;
layout(binding = 0) buffer Io { uint v[]; } io;
void main() { uint i = gl_GlobalInvocationID.x; if (i < 50u) io.v[i] = io.v[i] * 3u + i; }
)");
  auto pipe = c.CreatePipeline(shader, "triple_in_place");
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  auto io = MakeBuffer(c, 200, BufferKind::kMappedDevice, "io");
  ASSERT_TRUE(io);
  ASSERT_NE(io->mapped(), nullptr);
  std::vector<uint32_t> in(50);
  for (uint32_t i = 0; i < 50; ++i) in[i] = 1000 + 7 * i;
  std::memcpy(io->mapped(), in.data(), 200);
  const BufferBinding bind[] = {{0, io.get()}};
  auto set = c.AllocateDescriptorSet(**pipe, bind);
  ASSERT_TRUE(set.ok());
  auto cmd = c.CreateCommandBuffer("in_place");
  ASSERT_TRUE(cmd.ok());
  ASSERT_TRUE((*cmd)->Begin().ok());
  (*cmd)->BindPipeline(**pipe);
  (*cmd)->BindDescriptorSet(*set);
  (*cmd)->Dispatch(2);
  ASSERT_TRUE((*cmd)->End().ok());
  ASSERT_TRUE(c.Submit(**cmd).ok());
  std::vector<uint32_t> got(50);
  std::memcpy(got.data(), io->mapped(), 200);
  for (uint32_t i = 0; i < 50; ++i) ASSERT_EQ(got[i], in[i] * 3 + i) << i;
}

TEST_F(VkBackendTest, SubgroupSizeMatchesDeviceInfo) {
  Context& c = ctx();
  codegen::CompiledShader shader = Compile(R"(#version 460
#extension GL_KHR_shader_subgroup_basic : require
layout(local_size_x = 64) in;
layout(binding = 0) writeonly buffer Out { uint size; } o;
void main() { if (gl_LocalInvocationIndex == 0u) o.size = gl_SubgroupSize; }
)");
  auto pipe = c.CreatePipeline(shader, "subgroup_size");
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  auto out = MakeBuffer(c, 4, BufferKind::kHostVisible, "out");
  ASSERT_TRUE(out);
  const BufferBinding bind[] = {{0, out.get()}};
  auto set = c.AllocateDescriptorSet(**pipe, bind);
  ASSERT_TRUE(set.ok());
  auto cmd = c.CreateCommandBuffer("subgroup");
  ASSERT_TRUE(cmd.ok());
  ASSERT_TRUE((*cmd)->Begin().ok());
  (*cmd)->BindPipeline(**pipe);
  (*cmd)->BindDescriptorSet(*set);
  (*cmd)->Dispatch(1);
  ASSERT_TRUE((*cmd)->End().ok());
  ASSERT_TRUE(c.Submit(**cmd).ok());
  uint32_t size = 0;
  ASSERT_TRUE(c.Download(*out, 0, &size, 4).ok());
  EXPECT_EQ(size, c.info().subgroup_size);
}

TEST_F(VkBackendTest, TimestampsAreMonotonic) {
  Context& c = ctx();
  if (!c.info().timestamps) GTEST_SKIP() << "no timestamps on " << c.info().name;
  auto pool = c.CreateTimestampPool(2);
  ASSERT_TRUE(pool.ok()) << pool.status();
  auto buf = MakeBuffer(c, 1 << 20, BufferKind::kDeviceLocal, "ts");
  ASSERT_TRUE(buf);
  auto cmd = c.CreateCommandBuffer("ts");
  ASSERT_TRUE(cmd.ok());
  ASSERT_TRUE((*cmd)->Begin().ok());
  (*cmd)->ResetTimestamps(**pool);
  (*cmd)->WriteTimestamp(**pool, 0);
  (*cmd)->FillBuffer(*buf, 0, 1 << 20, 1);
  (*cmd)->WriteTimestamp(**pool, 1);
  ASSERT_TRUE((*cmd)->End().ok());
  for (int rep = 0; rep < 2; ++rep) {
    ASSERT_TRUE(c.Submit(**cmd).ok());
    auto ns = c.ReadTimestamps(**pool);
    ASSERT_TRUE(ns.ok()) << ns.status();
    EXPECT_GE((*ns)[1], (*ns)[0]);
  }
}

}  // namespace
}  // namespace doppler::vk
