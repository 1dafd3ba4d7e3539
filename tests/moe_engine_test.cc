// Mixtures of experts on the GPU with their experts quantized to Q8_0 at load (the router kept
// f32): logits near transformers' float32 ones and the same greedy tokens, through the fused
// expert kernels.
#include <gtest/gtest.h>

#include <cstdio>

#include "runtime/engine.h"
#include "tests/support/engine_env.h"
#include "tests/support/reference.h"
#include "tests/support/reference_logits.h"

namespace doppler {
namespace {

class MoeQ8EngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeQ8EngineTest, LogitsNearTransformersAndTheSameGreedyTokens) {
  absl::StatusOr<test::HfReference> ref = test::LoadHfReference(GetParam());
  ASSERT_TRUE(ref.ok()) << ref.status();
  runtime::EngineOptions o = test::ReferenceEngineOptions(ref->dir);
  o.quant = models::QuantScheme::kQ8_0;
  o.weight_dtype = graph::DType::kF32;
  absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  runtime::Engine& e = **engine;
  // Gate and up run as one gated expert product (fuse-gate-up) on Q8_0 experts.
  bool gated_q8 = false;
  for (const vk::PlannedDispatch& d : e.decode_plan().dispatches()) {
    gated_q8 |= d.variant.find("gemv.q8_0.gated") != std::string::npos;
  }
  EXPECT_TRUE(gated_q8);
  absl::StatusOr<test::ReferenceLogits> run = test::CompareWithReference(
      e, ref->input_ids, ref->greedy_tokens, ref->prefill_logits.data.data(), ref->decode_logits.data.data());
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->decode_top, test::FollowingTokens(ref->greedy_tokens, ref->next_token_after_greedy));
  const double prefill_err = run->prefill_error, decode_err = run->decode_error;
  std::printf("[ %s q8_0 ] worst row error: prefill %.3g, decode %.3g (of max |logit|)\n", GetParam().c_str(),
              prefill_err, decode_err);
  // Q8_0 rounds each weight to 1/254 of its block's largest: these random models land about 2% of
  // the largest logit off (qwen3_moe 0.0215, mixtral 0.0212 at most), inside the fixtures' bound for
  // a Q8_0 model against float logits (5% of max |logit|, gguf_model_test); wrong weights or
  // routing are off by about the logits' whole range.
  EXPECT_LE(prefill_err, 0.05);
  EXPECT_LE(decode_err, 0.05);
  EXPECT_EQ(e.device().validation_messages(), 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MoeQ8EngineTest, ::testing::Values("qwen3_moe", "mixtral"));

}  // namespace
}  // namespace doppler
