// llama-quantize's files of hf/llama_q in every quant type users download (quant/types/), run end to
// end on the GPU: prefill (the GEMM kernels) and decode (the matrix-vector kernels, x rounded
// through q8 blocks where the device has integer dot products), with their blocks decoded in the
// kernels, against the f32 transformers reference of hf/llama_q.
//
// The rule: a quantized model's logits differ from the f32 model's by its quantization error, so
// its greedy token may differ only where the reference's top two logits are closer than that. Each
// type states its error bound E, a fraction of the row's largest |logit| (wider for fewer bits);
// the test checks that the logits are within E of the reference's, and that the top token equals
// the reference's at every step (prompt positions and teacher-forced decode steps) whose reference
// margin (top-1 minus top-2 logit) exceeds E.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/engine.h"
#include "tests/support/fixtures.h"
#include "tests/support/reference.h"

namespace doppler {
namespace {

struct Case {
  const char* type;  // the file's llama-quantize type
  double bound;      // E, of the row's largest |logit|
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
  runtime::EngineOptions o;
  o.model_path = test::FixturesDir() / "quant" / "types" / (std::string("llama_q-") + c.type + ".gguf");
  o.kv_dtype = graph::DType::kF32;
  o.context = 64;
  o.prefill_chunk = 16;  // the prompt in two steps
  o.validation = true;
  absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  runtime::Engine& e = **engine;
  const int64_t vocab = e.config().vocab_size;
  const int64_t n = static_cast<int64_t>(ref->input_ids.size());

  // Each step's logits against the reference's row: the error within E, and the same top token
  // where the reference's margin exceeds E.
  double worst = 0;
  int compared = 0, agreed = 0;
  auto check = [&](const float* got, const float* want, const std::string& step) {
    const auto [margin, scale] = MarginAndScale(want, vocab);
    double err = 0;
    for (int64_t i = 0; i < vocab; ++i) err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    worst = std::max(worst, err / scale);
    EXPECT_LE(err, c.bound * scale) << step;
    if (margin > c.bound * scale) {
      ++compared;
      agreed += test::ArgmaxRow(got, vocab) == test::ArgmaxRow(want, vocab);
      EXPECT_EQ(test::ArgmaxRow(got, vocab), test::ArgmaxRow(want, vocab)) << step << ": margin " << margin;
    }
  };
  absl::StatusOr<std::vector<float>> prefill = e.PrefillLogits(ref->input_ids);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  for (int64_t t = 0; t < n; ++t) {
    check(&(*prefill)[static_cast<size_t>(t * vocab)], &ref->prefill_logits.data[static_cast<size_t>(t * vocab)],
          "prompt position " + std::to_string(t));
  }
  for (size_t i = 0; i < ref->greedy_tokens.size(); ++i) {
    absl::StatusOr<std::vector<float>> row = e.DecodeLogits(ref->greedy_tokens[i]);
    ASSERT_TRUE(row.ok()) << row.status();
    check(row->data(), &ref->decode_logits.data[i * static_cast<size_t>(vocab)], "decode step " + std::to_string(i));
  }
  std::printf("[ %s ] worst logit error %.3g of the row's max |logit| (bound %.3g); top token agreed at %d of %d "
              "steps whose margin exceeds the bound\n",
              c.type, worst, c.bound, agreed, compared);
  EXPECT_GT(compared, 0) << "no step's margin exceeds the bound: the test checks nothing";
  EXPECT_EQ(e.device().validation_messages(), 0);
}

// E per type: the 2-bit mix widest, 5-bit types narrowest.
INSTANTIATE_TEST_SUITE_P(Files, QuantTypesModelTest,
                         ::testing::Values(Case{"Q4_0", 0.1}, Case{"Q4_1", 0.1}, Case{"Q5_1", 0.05},
                                           Case{"Q2_K", 0.3}, Case{"Q3_K_M", 0.15}, Case{"Q5_K_M", 0.05},
                                           Case{"IQ4_NL", 0.1}, Case{"IQ4_XS", 0.1}),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.type); });

}  // namespace
}  // namespace doppler
