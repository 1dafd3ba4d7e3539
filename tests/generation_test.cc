// Text generation: streaming against run.c's output, stop strings, perplexity against run.c's
// logits, and chat formats recognised from real templates.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "chat/chat_format.h"
#include "formats/json_file.h"
#include "runtime/generator.h"
#include "runtime/perplexity.h"
#include "runtime/stop_matcher.h"
#include "tests/support/engine_env.h"
#include "tests/support/fixtures.h"
#include "tests/support/npy.h"
#include "tokenizers/tokenizer.h"

namespace doppler {
namespace {

std::filesystem::path Stories() { return test::FixturesDir() / "stories260K"; }

struct Golden {
  std::string prompt, stdout_text;
  std::vector<int32_t> prompt_ids, generated_ids, sequence_ids;
  std::string logits_file;
};

std::vector<Golden> LoadGolden() {
  absl::StatusOr<nlohmann::json> j = formats::ReadJsonFile(Stories() / "runc_golden.json");
  std::vector<Golden> out;
  if (!j.ok()) return out;
  for (const auto& c : (*j)["cases"]) {
    out.push_back({c["prompt"], c["stdout"], c["prompt_ids"], c["generated_ids"], c["sequence_ids"], c["logits_file"]});
  }
  return out;
}

TEST(StopMatcher, HoldsBackPossibleStopsAndCutsAtTheFirst) {
  runtime::StopMatcher m({"\n\nUser:", "END"});
  EXPECT_EQ(m.Push("Hello"), "Hello");
  EXPECT_EQ(m.Push(" world\n"), " world");  // "\n" may start "\n\nUser:"
  EXPECT_EQ(m.Push("\nUs"), "");
  EXPECT_EQ(m.Push("ed"), "\n\nUsed");        // not a stop after all
  EXPECT_EQ(m.Push(" it EN"), " it ");
  EXPECT_EQ(m.Push("D and more"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.Push("later"), "");
  runtime::StopMatcher none({});
  EXPECT_EQ(none.Push("abc"), "abc");
  EXPECT_EQ(none.Flush(), "");
}

// The built-in formats (for models without a template) write their family's turns.
TEST(ChatFormat, BuiltInFormatsWriteTheirFamilysTurns) {
  absl::StatusOr<chat::ChatFormat> chatml = chat::ChatFormatByName("chatml");
  ASSERT_TRUE(chatml.ok());
  EXPECT_EQ(chatml->UserTurn("Hi", "Be brief.", true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(chatml->UserTurn("More", "Be brief.", false), "<|im_start|>user\nMore<|im_end|>\n<|im_start|>assistant\n");
  absl::StatusOr<chat::ChatFormat> gemma = chat::ChatFormatByName("gemma");
  ASSERT_TRUE(gemma.ok());
  EXPECT_EQ(gemma->UserTurn("Hi", "Be brief.", true),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
  absl::StatusOr<chat::ChatFormat> unknown = chat::ChatFormatByName("vicuna");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("formats: chatml, llama3"), std::string::npos);
}

class StreamedGeneration : public ::testing::TestWithParam<int> {};

// The streamed text (prompt echoed, then the generation) is run.c's stdout without its final "\n".
TEST_P(StreamedGeneration, TextEqualsRunC) {
  const std::vector<Golden> golden = LoadGolden();
  ASSERT_EQ(golden.size(), 4u);
  const Golden& g = golden[static_cast<size_t>(GetParam())];
  absl::StatusOr<std::unique_ptr<tokenizers::Tokenizer>> tok = tokenizers::LoadLlama2cTokenizer(Stories() / "tok512.bin");
  ASSERT_TRUE(tok.ok()) << tok.status();
  absl::StatusOr<std::vector<int32_t>> ids = (*tok)->Encode(g.prompt, true);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, g.prompt_ids);
  auto engine = test::FixtureEngine(Stories() / "hf", graph::DType::kF32, 256, 64);
  ASSERT_TRUE(engine.ok()) << engine.status();
  runtime::GenerationOptions options;
  options.max_tokens = static_cast<int64_t>(g.generated_ids.size());
  options.echo_prompt = true;
  std::string streamed;
  absl::StatusOr<runtime::GenerationResult> r =
      runtime::Generate(**engine, **tok, *ids, options, [&](const std::string& s) { streamed += s; });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens, g.generated_ids);
  EXPECT_EQ(streamed + "\n", g.stdout_text);
  EXPECT_EQ(r->reason, runtime::StopReason::kMaxTokens);
}

INSTANTIATE_TEST_SUITE_P(RunCGolden, StreamedGeneration, ::testing::Range(0, 4));

TEST(Generation, StopStringEndsGenerationBeforeIt) {
  const std::vector<Golden> golden = LoadGolden();
  ASSERT_EQ(golden.size(), 4u) << "the run.c golden cases (stories260K/runc_golden.json)";
  const Golden& g = golden[1];
  absl::StatusOr<std::unique_ptr<tokenizers::Tokenizer>> tok = tokenizers::LoadLlama2cTokenizer(Stories() / "tok512.bin");
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto engine = test::FixtureEngine(Stories() / "hf", graph::DType::kF32, 256, 64);
  ASSERT_TRUE(engine.ok()) << engine.status();
  runtime::GenerationOptions options;
  options.max_tokens = 100;
  options.stop = {"Lily"};
  std::string streamed;
  absl::StatusOr<runtime::GenerationResult> r =
      runtime::Generate(**engine, **tok, g.prompt_ids, options, [&](const std::string& s) { streamed += s; });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reason, runtime::StopReason::kStopString);
  // run.c's continuation of "Once upon a time" reads ", there was a little girl named Lily."
  EXPECT_EQ(streamed, ", there was a little girl named ");
}

// A stop inside a GPU decode loop: the same text, and the sequence left where one-step decoding
// leaves it (the next tokens agree too).
TEST(Generation, StopInsideAGpuLoopLeavesTheSequenceAsOneStepDecodingDoes) {
  const std::vector<Golden> golden = LoadGolden();
  ASSERT_EQ(golden.size(), 4u) << "the run.c golden cases (stories260K/runc_golden.json)";
  const Golden& g = golden[1];
  absl::StatusOr<std::unique_ptr<tokenizers::Tokenizer>> tok = tokenizers::LoadLlama2cTokenizer(Stories() / "tok512.bin");
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::vector<runtime::GenerationResult> results;
  std::vector<std::vector<int32_t>> after;
  std::vector<int64_t> positions;
  for (int loop : {1, 8}) {
    auto engine = test::FixtureEngine(Stories() / "hf", graph::DType::kF32, 256, 64, "default", loop);
    ASSERT_TRUE(engine.ok()) << engine.status();
    runtime::GenerationOptions options;
    options.max_tokens = 100;
    options.stop = {"Lily"};
    absl::StatusOr<runtime::GenerationResult> r =
        runtime::Generate(**engine, **tok, g.prompt_ids, options, [](const std::string&) {});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->reason, runtime::StopReason::kStopString);
    results.push_back(*r);
    positions.push_back((*engine)->position());
    std::vector<int32_t> next;
    for (int i = 0; i < 5; ++i) next.push_back(*(*engine)->DecodeNext());
    after.push_back(next);
  }
  EXPECT_EQ(results[1].tokens, results[0].tokens);
  EXPECT_EQ(results[1].text, results[0].text);
  EXPECT_EQ(results[1].pending_token, results[0].pending_token);
  EXPECT_EQ(positions[1], positions[0]);
  EXPECT_EQ(after[1], after[0]);
}

// Perplexity of run.c's own 128-token sequence, scored from run.c's logits in the test.
TEST(Perplexity, MatchesRunCLogits) {
  const std::vector<Golden> golden = LoadGolden();
  ASSERT_FALSE(golden.empty()) << "no run.c golden cases under " << Stories();
  const Golden& g = golden[0];
  absl::StatusOr<test::NpyArray> logits = test::ReadNpy(Stories() / g.logits_file);
  ASSERT_TRUE(logits.ok()) << logits.status();
  const int64_t window = 128, vocab = 512;
  double nll = 0.0;
  int count = 0;
  for (int64_t j = window / 2; j + 1 < window; ++j) {
    const float* row = &logits->data[static_cast<size_t>(j * vocab)];
    double z = 0.0;
    for (int64_t v = 0; v < vocab; ++v) z += std::exp(static_cast<double>(row[v]));
    nll += std::log(z) - row[g.sequence_ids[static_cast<size_t>(j + 1)]];
    ++count;
  }
  const double want = std::exp(nll / count);
  auto engine = test::FixtureEngine(Stories() / "hf", graph::DType::kF32, window, window);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<int32_t> tokens(g.sequence_ids.begin(), g.sequence_ids.begin() + window);
  absl::StatusOr<runtime::PerplexityResult> r = runtime::Perplexity(**engine, tokens, window, 1, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->scored_tokens, count);
  EXPECT_NEAR(r->perplexity, want, 1e-4 * want);
  std::printf("perplexity %.6f (run.c logits: %.6f)\n", r->perplexity, want);
}

}  // namespace
}  // namespace doppler
