// The weight slices of the cooperative-matrix kernels (codegen/weight_parts.h: WeightSlices), run
// in a plain compute shader on whatever device the machine has (lavapipe in CI): where a format
// pairs its 32-value sub-blocks in shared words, the slice of an odd sub-block made from the even
// one's words (w_slice_pair) decodes exactly as the slice loaded on its own (w_slice_load), at
// every slice of random rows. The kernels that take such pairs (coop_rows) run only on devices
// with cooperative matrices; this checks the words they share everywhere.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend_vk/context.h"
#include "codegen/device_layout.h"
#include "codegen/shader_compiler.h"
#include "codegen/weight_parts.h"
#include "graph/dtype.h"
#include "quant/quant.h"
#include "tests/support/gpu_runner.h"
#include "tests/support/vk_test_env.h"

namespace doppler {
namespace {

using graph::DType;

// Invocation i takes slice t = i % 4 (values 8·t..) of the even sub-block of pair p = (i / 4) %
// PAIRS of row i / (4 · PAIRS), and writes the odd sub-block's slice there decoded from the pair
// (o[2i]) and from its own load (o[2i + 1]).
std::string PairShader(DType dtype, int64_t k, int64_t rows) {
  return absl::StrCat(R"(#version 460
#extension GL_EXT_control_flow_attributes : enable
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : enable
layout(local_size_x = 64) in;
)",
                      codegen::WeightSlices(0, dtype, k, /*halves=*/true), R"(
layout(std430, set = 0, binding = 1) writeonly buffer Out { uvec4 o[]; };
const uint PAIRS = )", k / 64, "u, ROWS = ", rows, R"(u;
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i >= ROWS * PAIRS * 4u) return;
  uint row = i / (4u * PAIRS), k = 64u * ((i / 4u) % PAIRS) + 8u * (i % 4u);
  o[2u * i] = w_slice_halves(w_slice_pair(w_slice_load(row, k), row, k + 32u), row, k + 32u);
  o[2u * i + 1u] = w_slice_halves(w_slice_load(row, k + 32u), row, k + 32u);
}
)");
}

class WeightSlicesTest : public vk::VkTest, public ::testing::WithParamInterface<DType> {};

TEST_P(WeightSlicesTest, AnOddSubBlocksSliceFromTheEvenOnesWordsIsItsOwn) {
  const DType dtype = GetParam();
  ASSERT_TRUE(codegen::SliceWordsPairSubBlocks(dtype)) << graph::Name(dtype);
  vk::Context& c = ctx();
  // Rows of three blocks, of values spread over several binades so that every scale and quant differs.
  const int64_t k = 768, rows = 5, slices = rows * (k / 64) * 4;
  std::vector<float> values = test::RandomFloats(static_cast<size_t>(rows * k), 7, -3.0f, 3.0f);
  for (size_t i = 0; i < values.size(); i += 37) values[i] *= 16.0f;
  absl::StatusOr<std::vector<uint8_t>> stored = quant::QuantizeRows(dtype, values.data(), rows, k);
  ASSERT_TRUE(stored.ok()) << stored.status();
  const std::vector<uint8_t> device = codegen::ToDeviceLayout(dtype, k, *std::move(stored));

  absl::StatusOr<codegen::CompiledShader> shader = codegen::CompileComputeShader(PairShader(dtype, k, rows));
  ASSERT_TRUE(shader.ok()) << shader.status();
  absl::StatusOr<std::unique_ptr<vk::ComputePipeline>> pipe = c.CreatePipeline(*shader, "weight slice pairs");
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  absl::StatusOr<std::unique_ptr<vk::Buffer>> w = c.CreateBuffer(device.size(), vk::BufferKind::kDeviceLocal, "w");
  absl::StatusOr<std::unique_ptr<vk::Buffer>> out = c.CreateBuffer(static_cast<size_t>(slices) * 32,
                                                                   vk::BufferKind::kDeviceLocal, "o");
  ASSERT_TRUE(w.ok() && out.ok());
  ASSERT_TRUE(c.Upload(**w, 0, device.data(), device.size()).ok());
  const vk::BufferBinding bindings[] = {{0, w->get()}, {1, out->get()}};
  absl::StatusOr<VkDescriptorSet> set = c.AllocateDescriptorSet(**pipe, bindings);
  ASSERT_TRUE(set.ok()) << set.status();
  absl::StatusOr<std::unique_ptr<vk::CommandBuffer>> cmd = c.CreateCommandBuffer("weight slice pairs");
  ASSERT_TRUE(cmd.ok()) << cmd.status();
  ASSERT_TRUE((*cmd)->Begin().ok());
  (*cmd)->BindPipeline(**pipe);
  (*cmd)->BindDescriptorSet(*set);
  (*cmd)->Dispatch(static_cast<uint32_t>((slices + 63) / 64));
  ASSERT_TRUE((*cmd)->End().ok());
  ASSERT_TRUE(c.Submit(**cmd).ok());

  std::vector<uint32_t> got(static_cast<size_t>(slices) * 8);
  ASSERT_TRUE(c.Download(**out, 0, got.data(), got.size() * 4).ok());
  int differing = 0, zero = 0;
  for (int64_t i = 0; i < slices; ++i) {
    const uint32_t* paired = &got[static_cast<size_t>(8 * i)];
    differing += std::memcmp(paired, paired + 4, 16) != 0;
    zero += paired[4] == 0 && paired[5] == 0 && paired[6] == 0 && paired[7] == 0;
  }
  EXPECT_EQ(differing, 0) << graph::Name(dtype) << ": of " << slices << " slices";
  EXPECT_EQ(zero, 0) << "slices decoded as zeros: the shader read nothing";
}

INSTANTIATE_TEST_SUITE_P(Formats, WeightSlicesTest, ::testing::Values(DType::kQ4_K, DType::kQ5_K, DType::kQ6_K),
                         [](const ::testing::TestParamInfo<DType>& p) { return std::string(graph::Name(p.param)); });

}  // namespace
}  // namespace doppler
