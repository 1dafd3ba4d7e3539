// The doppler command line, run as a user would: outputs, help, and one-line errors with a
// non-zero exit.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "tests/support/cli_runner.h"
#include "tests/support/fixtures.h"
#include "tests/support/reference.h"

namespace doppler {
namespace {

using Result = test::CommandResult;

Result Doppler(const std::string& args) { return test::RunDoppler(args); }

std::string Ids(const std::vector<int32_t>& ids) { return absl::StrJoin(ids, ","); }

std::string Model(const std::string& name) { return (test::FixturesDir() / "hf" / name).string(); }

int Lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

TEST(Cli, RunPrintsTheGreedyTokens) {
  auto ref = test::LoadHfReference("llama_tied");
  ASSERT_TRUE(ref.ok()) << ref.status();
  Result r = Doppler("run --model " + Model("llama_tied") + " --prompt-ids " + Ids(ref->input_ids) + " -n 16 --dtype f32 --temp 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, absl::StrJoin(ref->greedy_tokens, " ") + "\n");
}

TEST(Cli, RunStreamsTextWithTheModelsTokenizer) {
  const std::filesystem::path s = test::FixturesDir() / "stories260K";
  Result r = Doppler("run --model " + (s / "hf").string() + " --tokenizer " + (s / "tok512.bin").string() +
                     " -p 'Once upon a time' --temp 0 -n 20 --dtype f32");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "Once upon a time, there was a little girl named Lily. She loved to play outsid\n");
  EXPECT_NE(r.err.find("generated: 20 tokens"), std::string::npos) << r.err;
  // Sampling: the same seed gives the same text.
  const std::string sampled = "run --model " + (s / "hf").string() + " --tokenizer " + (s / "tok512.bin").string() +
                              " -p 'Once upon a time' -n 30 --seed 11 --temp 1.0 --top-k 20";
  Result a = Doppler(sampled), b = Doppler(sampled);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.err.find("seed 11"), std::string::npos) << a.err;
}

// --profile: the text is unchanged, and stderr gets the profile of decode steps after it, every
// dispatch naming its kernel.
TEST(Cli, RunProfileReportsDecodeStepsAfterTheText) {
  const std::filesystem::path s = test::FixturesDir() / "stories260K";
  Result r = Doppler("run --model " + (s / "hf").string() + " --tokenizer " + (s / "tok512.bin").string() +
                     " -p 'Once upon a time' --temp 0 -n 20 --dtype f32 --profile");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "Once upon a time, there was a little girl named Lily. She loved to play outsid\n");
  EXPECT_NE(r.err.find("profile of a decode step (mean of 8 profiled steps"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("matmul.gemv."), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("attention."), std::string::npos) << r.err;  // a kernel variant
  EXPECT_NE(r.err.find("total/measured"), std::string::npos) << r.err;
}

// Two turns on one KV cache: the second turn's prompt is only its own text (plus the first reply's
// end), so the position keeps growing and no turn re-reads the conversation.
TEST(Cli, ChatKeepsTheCacheAcrossTurns) {
  const std::filesystem::path s = test::FixturesDir() / "stories260K";
  const std::string run = test::DopplerBinary() + " run --chat --chat-format mistral --model " + (s / "hf").string() +
                          " --tokenizer " + (s / "tok512.bin").string() + " --temp 0 -n 12";
  Result r = test::RunShell("(printf 'Tell me a story\\nAnd then\\n\\n' | " + run + ")");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("chat (mistral format)"), std::string::npos) << r.err;
  const std::vector<std::string> summaries = absl::StrSplit(r.err, "prompt: ");
  ASSERT_EQ(summaries.size(), 3u) << r.err;  // two turns
  // run.c's model continues any prompt with a story; each reply is 12 tokens long.
  EXPECT_NE(summaries[1].find("generated: 12 tokens"), std::string::npos) << r.err;
  EXPECT_NE(summaries[2].find("generated: 12 tokens"), std::string::npos) << r.err;
  // Turn 1 feeds 25 tokens and generates 12; re-feeding that history would make turn 2's prompt
  // over 37 tokens, while its own text (the previous reply's end and the new message) is 25.
  int second_prompt = 0;
  ASSERT_TRUE(absl::SimpleAtoi(summaries[2].substr(0, summaries[2].find(' ')), &second_prompt)) << summaries[2];
  EXPECT_LT(second_prompt, 37);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
  Result bad = test::RunShell("(printf 'hi\\n' | " + test::DopplerBinary() + " run --chat --chat-format nope --model " +
                              (s / "hf").string() + " --tokenizer " + (s / "tok512.bin").string() + ")");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("unknown chat format 'nope'; formats: chatml"), std::string::npos) << bad.err;
}

// A copy of a fixture model whose config.json is edited.
std::filesystem::path EditedModel(const std::string& name, const std::string& tag,
                                  const std::function<void(nlohmann::json&)>& edit) {
  const std::filesystem::path dir = test::MakeTempDir(tag);
  std::filesystem::copy(test::FixturesDir() / "hf" / name, dir,
                        std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
  nlohmann::json j = nlohmann::json::parse(test::ReadFile(dir / "config.json"));
  edit(j);
  std::ofstream(dir / "config.json") << j.dump(2);
  return dir;
}

// Models that contradict themselves fail with one line naming the problem, and exit 1.
TEST(Cli, BadModelsGiveOneLineErrors) {
  const std::vector<std::pair<std::filesystem::path, std::string>> cases = {
      {EditedModel("llama", "cli_arch", [](nlohmann::json& j) { j["architectures"] = {"FooForCausalLM"}; }),
       "unsupported architecture 'FooForCausalLM'; supported: LlamaForCausalLM"},
      {EditedModel("llama_tied", "cli_missing", [](nlohmann::json& j) { j["tie_word_embeddings"] = false; }),
       "lm_head.weight"},
      {EditedModel("llama", "cli_shape", [](nlohmann::json& j) { j["hidden_size"] = 96; }),
       "tensor model.embed_tokens.weight is [512, 128] but the config gives [512, 96] (vocab_size x hidden_size)"},
  };
  for (const auto& [dir, message] : cases) {
    Result r = Doppler("run --model " + dir.string() + " --prompt-ids 1,2 -n 2");
    EXPECT_EQ(r.exit_code, 1) << dir;
    EXPECT_EQ(Lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  }
}

TEST(Cli, PerplexityPrintsRunningAndFinalValues) {
  const std::filesystem::path s = test::FixturesDir() / "stories260K";
  const std::filesystem::path text = test::MakeTempDir("ppl") / "text.txt";
  std::ofstream(text) << "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
                         "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high. "
                         "Lily's mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do.";
  Result r = Doppler("perplexity --model " + (s / "hf").string() + " --tokenizer " + (s / "tok512.bin").string() +
                     " --file " + text.string() + " -c 32");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("[1] "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("perplexity: "), std::string::npos) << r.out;
}

TEST(Cli, LogitsWritesPromptAndDecodeRows) {
  auto ref = test::LoadHfReference("llama");
  ASSERT_TRUE(ref.ok()) << ref.status();
  const std::filesystem::path out = test::MakeTempDir("logits") / "logits.bin";
  Result r = Doppler("logits --model " + Model("llama") + " --dtype f32 --ids " + Ids(ref->input_ids) +
                     " --decode-ids " + Ids(ref->greedy_tokens) + " --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string bytes = test::ReadFile(out);
  const int64_t vocab = 512, rows = 24 + 16;
  ASSERT_EQ(bytes.size(), static_cast<size_t>(rows * vocab * 4));
  std::vector<float> logits(static_cast<size_t>(rows * vocab));
  std::memcpy(logits.data(), bytes.data(), bytes.size());
  std::vector<float> prefill(logits.begin(), logits.begin() + 24 * vocab);
  std::vector<float> decode(logits.begin() + 24 * vocab, logits.end());
  EXPECT_LE(test::WorstRowError(prefill, ref->prefill_logits.data.data(), 24, vocab), 1e-4);
  EXPECT_LE(test::WorstRowError(decode, ref->decode_logits.data.data(), 16, vocab), 1e-4);
}

// -ctk/-ctv f32 keep an f32 KV cache, so an f32 GGUF gives transformers' logits to the fixture
// tolerance; the default f16 cache rounds K and V and lands measurably off them.
TEST(Cli, CacheTypeF32ChecksAnF32GgufExactly) {
  auto ref = test::LoadHfReference("phi3");
  ASSERT_TRUE(ref.ok()) << ref.status();
  const std::string model = (test::FixturesDir() / "gguf" / "lcpp" / "phi3-lcpp-f32.gguf").string();
  const std::filesystem::path dir = test::MakeTempDir("cache_type");
  double err[2] = {0, 0};
  for (int f32 = 0; f32 < 2; ++f32) {
    const std::filesystem::path out = dir / (f32 ? "f32.bin" : "f16.bin");
    Result r = Doppler("logits --model " + model + (f32 ? " -ctk f32 --cache-type-v f32" : "") + " --ids " +
                       Ids(ref->input_ids) + " --out " + out.string());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string bytes = test::ReadFile(out);
    const int64_t rows = static_cast<int64_t>(ref->input_ids.size());
    const int64_t vocab = static_cast<int64_t>(ref->prefill_logits.data.size()) / rows;
    ASSERT_EQ(bytes.size(), static_cast<size_t>(rows * vocab * 4));
    std::vector<float> logits(static_cast<size_t>(rows * vocab));
    std::memcpy(logits.data(), bytes.data(), bytes.size());
    err[f32] = test::WorstRowError(logits, ref->prefill_logits.data.data(), rows, vocab);
  }
  std::printf("phi3 GGUF vs transformers: f16 cache %.3g, f32 cache %.3g of max |logit|\n", err[0], err[1]);
  EXPECT_LE(err[1], 1e-4);
  EXPECT_GT(err[0], 10 * err[1]);
}

TEST(Cli, DevicesListsAtLeastOneDevice) {
  Result r = Doppler("devices");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("subgroup"), std::string::npos) << r.out;
}

TEST(Cli, HelpTellsTheOptions) {
  Result top = Doppler("--help");
  EXPECT_EQ(top.exit_code, 0);
  EXPECT_NE(top.out.find("logits"), std::string::npos);
  for (const char* cmd : {"run", "logits", "devices"}) {
    Result r = Doppler(std::string(cmd) + " --help");
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_NE(r.out.find(std::string("usage: doppler ") + cmd), std::string::npos) << r.out;
  }
}

struct BadCase {
  std::string args;
  std::string message;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << "doppler " << c.args; }

class CliErrors : public ::testing::TestWithParam<BadCase> {};

TEST_P(CliErrors, OneLineErrorAndNonZeroExit) {
  std::string args = GetParam().args;
  const std::string model = Model("llama");
  for (size_t at; (at = args.find("MODEL")) != std::string::npos;) args.replace(at, 5, model);
  Result r = Doppler(args);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(GetParam().message), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CliErrors,
    ::testing::Values(BadCase{"logits --ids 1,2 --out x.bin", "--model PATH"},
                      BadCase{"run --model /no/such/dir --prompt-ids 1,2", "/no/such/dir"},
                      BadCase{"run --model MODEL --prompt-ids 1,x", "'x' is not an integer id"},
                      BadCase{"run --model MODEL --prompt-ids 1,2 --frobnicate", "unknown option '--frobnicate'"},
                      BadCase{"run --model MODEL --prompt-ids 1,2 -n", "-n needs a value"},
                      BadCase{"run --model MODEL --prompt-ids 1,2 --top-p 1.5", "--top-p must be in (0, 1]"},
                      BadCase{"run --model MODEL -p hello", "no tokenizer.json in"},
                      BadCase{"run --model MODEL -p a --prompt-ids 1", "give one of -p TEXT, -f FILE, --prompt-ids IDS, --chat"},
                      BadCase{"run --model MODEL --prompt-ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17 -c 16",
                              "more than the context size 16"},
                      BadCase{"run --model MODEL --prompt-ids 1,9999", "token id 9999 is outside the vocabulary"},
                      BadCase{"run --model MODEL --prompt-ids 1 --dtype q9", "'q9' is not one of f16, bf16, f32"},
                      BadCase{"run --model MODEL --prompt-ids 1 --decode-activations q4",
                              "--decode-activations: 'q4' is not one of auto, q8, f32"},
                      BadCase{"run --model MODEL --prompt-ids 1 -ctk q8_0", "--cache-type-k: 'q8_0' is not one of f16, f32"},
                      BadCase{"run --model MODEL --prompt-ids 1 -ctk f32 -ctv f16",
                              "--cache-type-k f32 and --cache-type-v f16 differ"},
                      BadCase{"logits --model MODEL --ids 1,2", "--out FILE is required"},
                      BadCase{"frobnicate", "unknown command 'frobnicate'"}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return "case" + std::to_string(info.index); });

}  // namespace
}  // namespace doppler
