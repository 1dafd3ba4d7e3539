// The interpreter's paged caches (graph/paging.h) against transformers: four prompts prefilled one
// by one into shuffled pages, then decoded together, a row per sequence, must give each prompt's
// own greedy tokens and logits. The oracle must be right before the batched kernels are compared
// with it.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "checkpoints/weights.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "graph/interpreter.h"
#include "models/architecture.h"
#include "runtime/token_choice.h"
#include "tests/support/fixtures.h"
#include "tests/support/reference.h"

namespace doppler {
namespace {

using graph::Tensor;

class PagedInterpreterTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PagedInterpreterTest, PromptsDecodedTogetherMatchTransformers) {
  absl::StatusOr<std::vector<test::BatchReferencePrompt>> refs = test::LoadBatchReference(GetParam());
  ASSERT_TRUE(refs.ok()) << refs.status();
  const std::filesystem::path dir = test::FixturesDir() / "hf" / GetParam();
  absl::StatusOr<formats::ModelConfig> config = formats::ReadHfConfig(dir / "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<std::unique_ptr<formats::WeightStore>> store = formats::OpenSafetensors(dir);
  ASSERT_TRUE(store.ok()) << store.status();

  // Pages of 5 rows (no power of two), tables over a context of 64, four sequences' worth of pages
  // handed out in a shuffled order.
  const int64_t page_rows = 5, context = 64, table_pages = (context + page_rows - 1) / page_rows;
  const size_t sequences = refs->size();
  models::BuildOptions o;
  o.context = context;
  o.weight_dtype = graph::DType::kF32;
  o.kv_dtype = graph::DType::kF32;
  o.paging = {page_rows, table_pages, false};
  o.kv_pages = static_cast<int64_t>(sequences) * table_pages;
  absl::StatusOr<graph::Graph> prefill = models::BuildModelGraph(*config, o);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  prefill = runtime::AppendTokenChoice(*std::move(prefill), runtime::SamplingOptions{});
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  o.paging.row_per_sequence = true;
  o.logits_all_tokens = true;
  absl::StatusOr<graph::Graph> decode = models::BuildModelGraph(*config, o);
  ASSERT_TRUE(decode.ok()) << decode.status();
  decode = runtime::AppendTokenChoice(*std::move(decode), runtime::SamplingOptions{});
  ASSERT_TRUE(decode.ok()) << decode.status();

  std::vector<int32_t> pages(static_cast<size_t>(o.kv_pages));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), std::mt19937(7));
  auto table = [&](size_t s) {
    return std::vector<int32_t>(pages.begin() + static_cast<std::ptrdiff_t>(s * table_pages),
                                pages.begin() + static_cast<std::ptrdiff_t>((s + 1) * table_pages));
  };

  checkpoints::StoreParamSource params(**store);
  graph::Interpreter interp(params);
  const int64_t vocab = config->vocab_size;
  double worst = 0;
  // Each prompt in chunks of 8 rows of one sequence.
  for (size_t s = 0; s < sequences; ++s) {
    const std::vector<int32_t>& ids = (*refs)[s].input_ids;
    for (size_t at = 0; at < ids.size(); at += 8) {
      const size_t n = std::min<size_t>(8, ids.size() - at);
      std::vector<int32_t> positions(n);
      std::iota(positions.begin(), positions.end(), static_cast<int32_t>(at));
      absl::StatusOr<graph::StepRows> rows = graph::StepRows::Paged(prefill->paging(), positions, table(s));
      ASSERT_TRUE(rows.ok()) << rows.status();
      auto out = interp.Run(*prefill, {{"ids", Tensor::I32({static_cast<int64_t>(n)},
                                                           {ids.begin() + static_cast<std::ptrdiff_t>(at),
                                                            ids.begin() + static_cast<std::ptrdiff_t>(at + n)})}},
                            *rows);
      ASSERT_TRUE(out.ok()) << out.status();
      if (at + n < ids.size()) continue;
      const double err = test::WorstRowError(out->at("logits").f, (*refs)[s].logits.data.data(), 1, vocab);
      worst = std::max(worst, err);
      EXPECT_LE(err, 1e-4) << "prompt " << s;
      EXPECT_EQ(out->at("next_token").i[0], (*refs)[s].greedy_tokens[0]) << "prompt " << s;
    }
  }
  // Then every sequence one row of each decode step, feeding its reference greedy tokens.
  const size_t steps = (*refs)[0].greedy_tokens.size() - 1;
  for (size_t j = 0; j < steps; ++j) {
    std::vector<int32_t> ids, positions, tables;
    for (size_t s = 0; s < sequences; ++s) {
      ids.push_back((*refs)[s].greedy_tokens[j]);
      positions.push_back(static_cast<int32_t>((*refs)[s].input_ids.size() + j));
      const std::vector<int32_t> t = table(s);
      tables.insert(tables.end(), t.begin(), t.end());
    }
    absl::StatusOr<graph::StepRows> rows = graph::StepRows::Paged(decode->paging(), positions, tables);
    ASSERT_TRUE(rows.ok()) << rows.status();
    auto out = interp.Run(*decode, {{"ids", Tensor::I32({static_cast<int64_t>(sequences)}, ids)}}, *rows);
    ASSERT_TRUE(out.ok()) << out.status();
    for (size_t s = 0; s < sequences; ++s) {
      const std::vector<float> row(out->at("logits").f.begin() + static_cast<std::ptrdiff_t>(s * vocab),
                                   out->at("logits").f.begin() + static_cast<std::ptrdiff_t>((s + 1) * vocab));
      const double err = test::WorstRowError(row, &(*refs)[s].logits.data[(j + 1) * static_cast<size_t>(vocab)], 1, vocab);
      worst = std::max(worst, err);
      EXPECT_LE(err, 1e-4) << "prompt " << s << " step " << j;
      EXPECT_EQ(out->at("next_token").i[s], (*refs)[s].greedy_tokens[j + 1]) << "prompt " << s << " step " << j;
    }
  }
  std::printf("[ %s paged interpreter ] worst row error %.3g (of max |logit|)\n", GetParam().c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PagedInterpreterTest,
                         ::testing::Values("llama", "gemma3", "mistral", "phi3", "qwen3_moe", "gpt_oss"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace doppler
