// llama-quantize's files of hf/llama_q in every quant type users download (quant/types/), run end to
// end on the GPU: prefill (the GEMM kernels) and decode (the matrix-vector kernels, x rounded
// through q8 blocks where the device has integer dot products), with their blocks decoded in the
// kernels, against the f32 transformers reference of hf/llama_q.
//
// The rule: a step's quantization error σ is the RMS over the vocabulary of its logits' difference
// from the reference's. Two logits' errors then differ by about √2·σ, so the greedy token may
// differ from the reference's only where the reference's margin (top-1 minus top-2 logit) is within
// a few σ: the test requires the same top token at every step (prompt positions and teacher-forced
// decode steps) whose margin exceeds 4σ, and σ within a bound per type (a fraction of the row's
// largest |logit|, wider for fewer bits; the fixture model is tiny and random-like, so its errors
// are far larger than a trained model's). The 2-bit file's error exceeds every margin of this
// model, so for it only the bound is checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/engine.h"
#include "tests/support/fixtures.h"
#include "tests/support/engine_env.h"
#include "tests/support/reference.h"
#include "tests/support/reference_logits.h"

namespace doppler {
namespace {

struct Case {
  const char* type;     // the file's llama-quantize type
  double rms_bound;     // σ's bound, of the row's largest |logit|
  bool expect_compared;  // whether some step's margin exceeds 4σ on this model
};

// Row `r` of `rows` rows of `cols`: (top-1 minus top-2, largest |value|).
std::pair<double, double> MarginAndScale(const float* row, int64_t cols) {
  double first = -INFINITY, second = -INFINITY, scale = 0;
  for (int64_t i = 0; i < cols; ++i) {
    const double v = row[i];
    if (v > first) {
      second = first;
      first = v;
    } else if (v > second) {
      second = v;
    }
    scale = std::max(scale, std::abs(v));
  }
  return {first - second, scale};
}

class QuantTypesModelTest : public ::testing::TestWithParam<Case> {};

TEST_P(QuantTypesModelTest, GreedyTokensAgreeWhereTheMarginExceedsTheQuantizationError) {
  const Case& c = GetParam();
  absl::StatusOr<test::HfReference> ref = test::LoadHfReference("llama_q");
  ASSERT_TRUE(ref.ok()) << ref.status();
  // A prefill chunk of 20: the prompt in two steps, the first in the prefill (tiled) kernels.
  const runtime::EngineOptions o = test::ReferenceEngineOptions(
      test::FixturesDir() / "quant" / "types" / (std::string("llama_q-") + c.type + ".gguf"), 20);
  absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  runtime::Engine& e = **engine;
  const int64_t vocab = e.config().vocab_size;
  const int64_t n = static_cast<int64_t>(ref->input_ids.size());

  // Each step's logits against the reference's row: σ within its bound, and the same top token
  // where the reference's margin exceeds 4σ.
  double worst = 0;
  int compared = 0;
  auto check = [&](const float* got, const float* want, const std::string& step) {
    const auto [margin, scale] = MarginAndScale(want, vocab);
    double sq = 0;
    for (int64_t i = 0; i < vocab; ++i) sq += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    const double sigma = std::sqrt(sq / static_cast<double>(vocab));
    worst = std::max(worst, sigma / scale);
    EXPECT_LE(sigma, c.rms_bound * scale) << step;
    if (margin > 4 * sigma) {
      ++compared;
      EXPECT_EQ(test::ArgmaxRow(got, vocab), test::ArgmaxRow(want, vocab)) << step << ": margin " << margin << ", σ " << sigma;
    }
  };
  absl::StatusOr<test::ReferenceLogits> run = test::CompareWithReference(
      e, ref->input_ids, ref->greedy_tokens, ref->prefill_logits.data.data(), ref->decode_logits.data.data());
  ASSERT_TRUE(run.ok()) << run.status();
  for (int64_t t = 0; t < n; ++t) {
    check(&run->prefill[static_cast<size_t>(t * vocab)], &ref->prefill_logits.data[static_cast<size_t>(t * vocab)],
          "prompt position " + std::to_string(t));
  }
  for (size_t i = 0; i < ref->greedy_tokens.size(); ++i) {
    check(&run->decode[i * static_cast<size_t>(vocab)], &ref->decode_logits.data[i * static_cast<size_t>(vocab)],
          "decode step " + std::to_string(i));
  }
  std::printf("[ %s ] worst RMS logit error %.3g of the row's max |logit| (bound %.3g); %d steps' margins exceed 4σ\n",
              c.type, worst, c.rms_bound, compared);
  if (c.expect_compared) EXPECT_GT(compared, 0) << "no step's margin exceeds 4σ: the token check checks nothing";
  EXPECT_EQ(e.device().validation_messages(), 0);
}

INSTANTIATE_TEST_SUITE_P(Files, QuantTypesModelTest,
                         ::testing::Values(Case{"Q4_0", 0.1, true}, Case{"Q4_1", 0.1, true}, Case{"Q5_1", 0.05, true},
                                           Case{"Q2_K", 0.3, false}, Case{"Q3_K_M", 0.16, true},
                                           Case{"Q5_K_M", 0.05, true}, Case{"IQ4_NL", 0.1, true},
                                           Case{"IQ4_XS", 0.1, true}),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.type); });

}  // namespace
}  // namespace doppler
