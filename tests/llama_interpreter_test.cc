// The CPU reference interpreter against transformers' float32 logits: the oracle must itself be
// right before GPU kernels are compared with it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "checkpoints/weights.h"
#include "formats/safetensors.h"
#include "graph/interpreter.h"
#include "models/architecture.h"
#include "runtime/token_choice.h"
#include "tests/support/reference.h"

namespace doppler {
namespace {

using graph::Tensor;

class InterpreterFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(InterpreterFixtureTest, PrefillAndDecodeMatchTransformers) {
  absl::StatusOr<test::HfReference> ref = test::LoadHfReference(GetParam());
  ASSERT_TRUE(ref.ok()) << ref.status();
  absl::StatusOr<formats::ModelConfig> config = formats::ReadHfConfig(ref->dir / "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<std::unique_ptr<formats::WeightStore>> store = formats::OpenSafetensors(ref->dir);
  ASSERT_TRUE(store.ok()) << store.status();

  models::BuildOptions options;
  options.context = 64;
  options.weight_dtype = graph::DType::kF32;
  options.kv_dtype = graph::DType::kF32;
  options.logits_all_tokens = true;
  // The whole prompt is one step: sliding-window layers get a ring of window + 23 rows, which the
  // 16 decode steps wrap around.
  options.max_step_tokens = static_cast<int64_t>(ref->input_ids.size());
  absl::StatusOr<graph::Graph> g = models::BuildModelGraph(*config, options);
  ASSERT_TRUE(g.ok()) << g.status();
  g = runtime::AppendTokenChoice(*std::move(g), runtime::SamplingOptions{});  // greedy
  ASSERT_TRUE(g.ok()) << g.status();

  checkpoints::StoreParamSource params(**store);
  graph::Interpreter interp(params);
  const int64_t vocab = config->vocab_size;
  const int64_t n = static_cast<int64_t>(ref->input_ids.size());
  auto out = interp.Run(*g, {{"ids", Tensor::I32({n}, ref->input_ids)}}, 0);
  ASSERT_TRUE(out.ok()) << out.status();
  const double prefill_err = test::WorstRowError(out->at("logits").f, ref->prefill_logits.data.data(), n, vocab);
  EXPECT_LE(prefill_err, 1e-4);
  EXPECT_EQ(out->at("next_token").i[0], ref->greedy_tokens[0]);
  double decode_err = 0.0;

  for (size_t i = 0; i < ref->greedy_tokens.size(); ++i) {
    auto step = interp.Run(*g, {{"ids", Tensor::I32({1}, {ref->greedy_tokens[i]})}}, n + static_cast<int64_t>(i));
    ASSERT_TRUE(step.ok()) << step.status();
    const double err = test::WorstRowError(step->at("logits").f, &ref->decode_logits.data[i * vocab], 1, vocab);
    decode_err = std::max(decode_err, err);
    EXPECT_LE(err, 1e-4) << "decode step " << i;
    const int32_t want = i + 1 < ref->greedy_tokens.size() ? ref->greedy_tokens[i + 1] : ref->next_token_after_greedy;
    EXPECT_EQ(step->at("next_token").i[0], want) << "decode step " << i;
  }
  std::printf("[ %s interpreter ] worst row error: prefill %.3g, decode %.3g (of max |logit|)\n", GetParam().c_str(),
              prefill_err, decode_err);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, InterpreterFixtureTest,
                         ::testing::Values("llama", "llama_tied", "llama_q", "gemma3", "qwen2", "qwen3", "mistral",
                                           "phi3", "qwen3_yarn", "phi3_longrope", "qwen3_moe", "mixtral", "gpt_oss"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace doppler
