// stories260K (a real trained model) against llama2.c's run.c: its logits at every position and
// every greedily generated id, for the four prompts of runc_golden.json.
#include <gtest/gtest.h>


#include "nlohmann/json.hpp"
#include "tests/support/engine_env.h"
#include "tests/support/fixtures.h"
#include "tests/support/npy.h"
#include "tests/support/reference.h"

namespace doppler {
namespace {

struct GoldenCase {
  std::vector<int32_t> prompt_ids, generated_ids, sequence_ids;
  std::string logits_file;
};

std::vector<GoldenCase> LoadGolden() {
  const nlohmann::json j = test::ReadJsonFile(test::FixturesDir() / "stories260K" / "runc_golden.json");
  std::vector<GoldenCase> cases;
  for (const auto& c : j["cases"]) {
    cases.push_back({c["prompt_ids"].get<std::vector<int32_t>>(), c["generated_ids"].get<std::vector<int32_t>>(),
                     c["sequence_ids"].get<std::vector<int32_t>>(), c["logits_file"].get<std::string>()});
  }
  return cases;
}

class StoriesTest : public ::testing::TestWithParam<int> {};

TEST_P(StoriesTest, GreedyIdsAndLogitsMatchRunC) {
  const std::vector<GoldenCase> cases = LoadGolden();
  ASSERT_EQ(cases.size(), 4u);
  const GoldenCase& g = cases[static_cast<size_t>(GetParam())];
  const std::filesystem::path dir = test::FixturesDir() / "stories260K";
  auto engine = test::FixtureEngine(dir / "hf", graph::DType::kF32, 256, 64);
  ASSERT_TRUE(engine.ok()) << engine.status();
  runtime::Engine& e = **engine;

  absl::StatusOr<std::vector<int32_t>> generated = test::Generate(e, g.prompt_ids, g.generated_ids.size());
  ASSERT_TRUE(generated.ok()) << generated.status();
  EXPECT_EQ(*generated, g.generated_ids);

  // run.c's logits row p comes from forward(sequence_ids[p], p), p < 128.
  absl::StatusOr<test::NpyArray> ref = test::ReadNpy(dir / g.logits_file);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const int64_t rows = ref->shape[0], vocab = ref->shape[1];
  e.Reset();
  absl::StatusOr<std::vector<float>> logits =
      e.PrefillLogits(std::vector<int32_t>(g.sequence_ids.begin(), g.sequence_ids.begin() + rows));
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_LE(test::WorstRowError(*logits, ref->data.data(), rows, vocab), 1e-4);
  EXPECT_EQ(e.device().validation_messages(), 0);
}

INSTANTIATE_TEST_SUITE_P(RunCGolden, StoriesTest, ::testing::Range(0, 4));

}  // namespace
}  // namespace doppler
