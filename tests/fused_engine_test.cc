// Fused and unfused plans on the GPU: every fixture model, run once with the default pass
// pipeline and once with none, gives the same logits (1e-5 relative) and the same greedy tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "tests/support/engine_env.h"
#include "tests/support/gpu_runner.h"
#include "tests/support/reference.h"
#include "tests/support/scoped_tune.h"

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

// Gemma 3 with Q4_K_M weights and q8 decode: its residual norms computed by the projections that
// read them (norms in x: codegen/in_matmul.h) against the same plans with those norms in the
// kernels of the projections before them (tails: DOPPLER_TUNE's matmul.norm_in_x=0), and against
// f32 decode of the same weights.
TEST(FusedEngineQ8Test, Gemma3ResidualNormsInTheirConsumers) {
  absl::StatusOr<test::HfReference> ref = test::LoadHfReference("gemma3");
  ASSERT_TRUE(ref.ok()) << ref.status();
  auto engine = [&](runtime::DecodeActivations activations) {
    runtime::EngineOptions o;
    o.model_path = ref->dir;
    o.quant = quant::QuantScheme::kQ4_K_M;
    o.weight_dtype = graph::DType::kF32;
    o.decode_activations = activations;
    o.context = 64;
    o.prefill_chunk = 32;
    o.validation = true;
    return runtime::Engine::Create(o);
  };
  auto consumer = engine(runtime::DecodeActivations::kQ8);
  auto exact = engine(runtime::DecodeActivations::kF32);
  for (auto* e : {&consumer, &exact}) ASSERT_TRUE(e->ok()) << e->status();
  // The consumers of one norm share a barrier level: q/k/v in one dispatch, or q and k in one and v
  // in another where v's weights are of another type (Q4_K_M: Q5_0 and Q8_0 in the layers that
  // give v more bits).
  std::map<int, int> restating;  // level -> dispatches computing a residual norm as they read x
  for (const vk::PlannedDispatch& d : (*consumer)->decode_plan().dispatches()) {
    if (d.variant.find("+residual_norm_x") != std::string::npos) ++restating[d.level];
  }
  // Every layer's two residual norms but the last one's (the final norm is the LM head's prologue).
  EXPECT_EQ(restating.size(), static_cast<size_t>(2 * (*consumer)->config().num_layers - 1));
  EXPECT_TRUE(std::any_of(restating.begin(), restating.end(), [](const auto& l) { return l.second == 2; }))
      << "no norm read by two projections";
  const Outputs a = Evaluate(**consumer, *ref);
  const Outputs x = Evaluate(**exact, *ref);
  Outputs b;
  {
    const test::ScopedTune producers("matmul.norm_in_x=0");
    auto producer = engine(runtime::DecodeActivations::kQ8);
    ASSERT_TRUE(producer.ok()) << producer.status();
    for (const vk::PlannedDispatch& d : (*producer)->decode_plan().dispatches()) {
      EXPECT_EQ(d.variant.find("+residual_norm_x"), std::string::npos) << d.variant;
    }
    b = Evaluate(**producer, *ref);
  }
  ASSERT_EQ(a.decode.size(), b.decode.size());
  ASSERT_EQ(a.decode.size(), x.decode.size());
  double worst_b = 0, worst_x = 0;
  for (size_t i = 0; i < a.decode.size(); ++i) {
    worst_b = std::max(worst_b, test::RelativeError(a.decode[i], b.decode[i]));
    worst_x = std::max(worst_x, test::RelativeError(a.decode[i], x.decode[i]));
    // Both round the same normalised sums through q8 blocks, one as s·g / d with 1 / rms applied to
    // the products, the other as n = s·g / rms: a value within an ulp of a half may round the
    // other way.
    EXPECT_LE(test::RelativeError(a.decode[i], b.decode[i]), 1e-4) << i;
    EXPECT_LE(test::RelativeError(a.decode[i], x.decode[i]), 0.05) << i;
  }
  std::printf("[ gemma3 q4_k_m, q8 decode ] norms in the consumers vs in the producers: %.3g, vs f32 decode: %.3g\n",
              worst_b, worst_x);
  EXPECT_EQ(a.greedy, b.greedy);
  EXPECT_EQ((*consumer)->device().validation_messages(), 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FusedEngineTest,
                         ::testing::Values("llama", "llama_tied", "llama_q", "qwen2", "qwen3", "gemma3", "mistral", "phi3",
                                           "qwen3_moe", "mixtral", "gpt_oss"));

}  // namespace
}  // namespace doppler
