// The model that ships with doppler (default_model/, trained by default_model/train.py): its
// tokenizer, perplexity and greedy tokens against the PyTorch references the training script wrote
// (default_model/reference.json), and `doppler run` with no --model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "formats/gguf/gguf_file.h"
#include "nlohmann/json.hpp"
#include "runtime/engine.h"
#include "tests/support/cli_runner.h"
#include "tokenizers/gguf_tokenizer.h"

namespace doppler {
namespace {

// default_model/ of the checkout this test was built from.
std::filesystem::path DefaultDir() {
  return std::filesystem::path(__FILE__).parent_path().parent_path() / "default_model";
}

nlohmann::json Reference() {
  std::ifstream in(DefaultDir() / "reference.json");
  EXPECT_TRUE(in.good()) << "cannot read " << (DefaultDir() / "reference.json");
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

TEST(DefaultModel, TokenizerEncodesAsTheTrainingScriptDid) {
  const nlohmann::json ref = Reference();
  ASSERT_FALSE(ref.is_discarded());
  absl::StatusOr<std::unique_ptr<formats::GgufFile>> file = formats::GgufFile::Open(DefaultDir() / "default-q8_0.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::unique_ptr<tokenizers::Tokenizer>> tok = tokenizers::LoadGgufTokenizer(**file);
  ASSERT_TRUE(tok.ok()) << tok.status();
  ASSERT_EQ((*tok)->bos_id(), ref["bos_id"].get<int32_t>());
  absl::StatusOr<std::vector<int32_t>> heldout =
      (*tok)->Encode(test::ReadFile(DefaultDir() / ref["heldout_file"].get<std::string>()), /*add_special=*/false);
  ASSERT_TRUE(heldout.ok()) << heldout.status();
  EXPECT_EQ(*heldout, ref["heldout_ids"].get<std::vector<int32_t>>());
  for (const nlohmann::json& g : ref["greedy"]) {
    absl::StatusOr<std::vector<int32_t>> ids = (*tok)->Encode(g["prompt"].get<std::string>(), /*add_special=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, g["prompt_ids"].get<std::vector<int32_t>>()) << g["prompt"];
  }
}

// `doppler perplexity` on the shipped Q8_0 model is within 2% of PyTorch's float32 value.
TEST(DefaultModel, HeldOutPerplexityMatchesPyTorch) {
  const nlohmann::json ref = Reference();
  ASSERT_FALSE(ref.is_discarded());
  const double want = ref["perplexity"]["heldout.txt"]["f32"]["perplexity"].get<double>();
  const test::CommandResult r =
      test::RunDoppler("perplexity --model " + (DefaultDir() / "default-q8_0.gguf").string() + " -f " +
                       (DefaultDir() / ref["heldout_file"].get<std::string>()).string() +
                       " -c " + std::to_string(ref["ctx"].get<int>()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t at = r.out.find("perplexity: ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const double got = std::stod(r.out.substr(at + 12));
  std::printf("held-out perplexity: doppler q8_0 %.4f, PyTorch f32 %.4f\n", got, want);
  EXPECT_LT(std::abs(got / want - 1.0), 0.02) << "doppler " << got << ", PyTorch " << want;
  EXPECT_NE(r.out.find("over " + std::to_string(ref["perplexity"]["heldout.txt"]["f32"]["scored_tokens"].get<int>()) +
                       " tokens"),
            std::string::npos)
      << r.out;
}

// Greedy tokens of the F16 model run with --dtype f32 (f32 arithmetic, an f16 KV cache) equal
// PyTorch's in float32 with the same f16-rounded matrices and f16-rounded K/V.
TEST(DefaultModel, GreedyTokensMatchPyTorch) {
  const nlohmann::json ref = Reference();
  ASSERT_FALSE(ref.is_discarded());
  runtime::EngineOptions o;
  o.model_path = DefaultDir() / "default-f16.gguf";
  o.weight_dtype = graph::DType::kF32;  // as `doppler run --dtype f32`
  o.validation = true;
  absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  runtime::Engine& e = **engine;
  ASSERT_EQ(e.context(), ref["ctx"].get<int64_t>());
  for (const nlohmann::json& g : ref["greedy"]) {
    const std::vector<int32_t> prompt = g["prompt_ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> want = g["ids"].get<std::vector<int32_t>>();
    e.Reset();
    std::vector<int32_t> got;
    absl::StatusOr<int32_t> token = e.Prefill(prompt);
    ASSERT_TRUE(token.ok()) << token.status();
    got.push_back(*token);
    while (got.size() < want.size()) {
      token = e.DecodeNext();
      ASSERT_TRUE(token.ok()) << token.status();
      got.push_back(*token);
    }
    EXPECT_EQ(got, want) << g["prompt"];
  }
}

TEST(DefaultModel, RunWithoutModelUsesIt) {
  const test::CommandResult r = test::RunDoppler("run -p 'In the beginning' -n 8 --temp 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("In the beginning", 0), 0u) << r.out;
  EXPECT_GT(r.out.size(), std::string("In the beginning\n").size()) << r.out;
  EXPECT_NE(r.err.find("default-q8_0.gguf"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("generated: 8 tokens"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace doppler
