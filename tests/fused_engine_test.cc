// Fused and unfused plans on the GPU: every fixture model, run once with the default pass
// pipeline and once with none, gives the same logits (1e-5 relative) and the same greedy tokens.
#include <gtest/gtest.h>

#include "tests/support/engine_env.h"
#include "tests/support/gpu_runner.h"
#include "tests/support/reference.h"

namespace doppler {
namespace {

class FusedEngineTest : public ::testing::TestWithParam<std::string> {};

// Prefill logits of every position, then decode steps' logits and the GPU-chosen tokens.
struct Outputs {
  std::vector<float> prefill;
  std::vector<std::vector<float>> decode;
  std::vector<int32_t> greedy;
};

Outputs Evaluate(runtime::Engine& e, const test::HfReference& ref) {
  Outputs r;
  absl::StatusOr<std::vector<float>> prefill = e.PrefillLogits(ref.input_ids);
  EXPECT_TRUE(prefill.ok()) << prefill.status();
  if (prefill.ok()) r.prefill = *prefill;
  for (size_t i = 0; i < 6; ++i) {
    absl::StatusOr<std::vector<float>> row = e.DecodeLogits(ref.greedy_tokens[i]);
    EXPECT_TRUE(row.ok()) << row.status();
    if (row.ok()) r.decode.push_back(*row);
  }
  absl::StatusOr<std::vector<int32_t>> greedy = test::Generate(e, ref.input_ids, 8);
  EXPECT_TRUE(greedy.ok()) << greedy.status();
  if (greedy.ok()) r.greedy = *greedy;
  return r;
}

TEST_P(FusedEngineTest, SameLogitsAndTokensAsUnfused) {
  absl::StatusOr<test::HfReference> ref = test::LoadHfReference(GetParam());
  ASSERT_TRUE(ref.ok()) << ref.status();
  auto fused = test::FixtureEngine(ref->dir, graph::DType::kF32, 64, 32, "default");
  auto unfused = test::FixtureEngine(ref->dir, graph::DType::kF32, 64, 32, "none");
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_TRUE(unfused.ok()) << unfused.status();
  EXPECT_LT((*fused)->decode_plan().stats().dispatches, (*unfused)->decode_plan().stats().dispatches);
  const Outputs a = Evaluate(**fused, *ref);
  const Outputs b = Evaluate(**unfused, *ref);
  EXPECT_LE(test::RelativeError(a.prefill, b.prefill), 1e-5);
  ASSERT_EQ(a.decode.size(), b.decode.size());
  for (size_t i = 0; i < a.decode.size(); ++i) EXPECT_LE(test::RelativeError(a.decode[i], b.decode[i]), 1e-5) << i;
  EXPECT_EQ(a.greedy, b.greedy);
  EXPECT_EQ((*fused)->device().validation_messages(), 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FusedEngineTest,
                         ::testing::Values("llama", "llama_tied", "llama_q", "qwen2", "qwen3", "gemma3", "mistral", "phi3"));

}  // namespace
}  // namespace doppler
