// How the engine drives the device, and how it refuses bad input.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include "nlohmann/json.hpp"

#include "models/architecture.h"
#include "tests/support/engine_env.h"
#include "tests/support/fixtures.h"
#include "tests/support/reference.h"

namespace doppler {
namespace {

std::filesystem::path Fixture(const std::string& name) { return test::FixturesDir() / "hf" / name; }

// The first n tokens one-step decoding (no GPU loop) gives after the prompt of `ref`.
absl::StatusOr<std::vector<int32_t>> OneStepTokens(const test::HfReference& ref, int n) {
  auto one = test::FixtureEngine(Fixture("llama"), graph::DType::kF32, 64, 32, "default", 1);
  if (!one.ok()) return one.status();
  if (absl::StatusOr<int32_t> t = (*one)->Prefill(ref.input_ids); !t.ok()) return t.status();
  std::vector<int32_t> tokens;
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<int32_t> t = (*one)->DecodeNext();
    if (!t.ok()) return t.status();
    tokens.push_back(*t);
  }
  return tokens;
}

TEST(EngineBehaviour, DecodeRecordsOnceAndSubmitsOncePerToken) {
  auto engine = test::FixtureEngine(Fixture("llama"), graph::DType::kF32);
  ASSERT_TRUE(engine.ok()) << engine.status();
  runtime::Engine& e = **engine;
  absl::StatusOr<test::HfReference> ref = test::LoadHfReference("llama");
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_TRUE(e.Prefill(ref->input_ids).ok());
  const uint64_t submits_before = e.device().submit_count();
  constexpr int kTokens = 12;
  for (int i = 0; i < kTokens; ++i) ASSERT_TRUE(e.DecodeNext().ok());
  EXPECT_EQ(e.device().submit_count() - submits_before, static_cast<uint64_t>(kTokens));
  EXPECT_EQ(e.decode_plan().record_count(), 1);
  EXPECT_EQ(e.prefill_plan().record_count(), 1);
  EXPECT_EQ(e.position(), static_cast<int64_t>(ref->input_ids.size()) + kTokens);
}

// The GPU decode loop runs the one-step plan's dispatches for several positions in one submit:
// the same tokens at the same positions, one submit per loop.
TEST(EngineBehaviour, GpuLoopDecodesWhatOneStepDecodingDoes) {
  absl::StatusOr<test::HfReference> ref = test::LoadHfReference("llama");
  ASSERT_TRUE(ref.ok()) << ref.status();
  auto one = test::FixtureEngine(Fixture("llama"), graph::DType::kF32, 64, 32, "default", /*gpu_loop=*/1);
  auto looped = test::FixtureEngine(Fixture("llama"), graph::DType::kF32, 64, 32, "default", /*gpu_loop=*/5);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE(looped.ok()) << looped.status();
  EXPECT_EQ((*one)->gpu_loop(), 1);
  EXPECT_EQ((*looped)->gpu_loop(), 5);
  ASSERT_TRUE((*one)->Prefill(ref->input_ids).ok());
  std::vector<int32_t> want;
  for (int i = 0; i < 12; ++i) {
    absl::StatusOr<int32_t> t = (*one)->DecodeNext();
    ASSERT_TRUE(t.ok()) << t.status();
    want.push_back(*t);
  }
  runtime::Engine& e = **looped;
  ASSERT_TRUE(e.Prefill(ref->input_ids).ok());
  const uint64_t submits_before = e.device().submit_count();
  std::vector<int32_t> got;
  for (int loop = 0; loop < 2; ++loop) {
    absl::StatusOr<std::vector<int32_t>> t = e.DecodeUpTo(5);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ(t->size(), 5u);
    got.insert(got.end(), t->begin(), t->end());
  }
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<int32_t> t = e.DecodeNext();  // continues from the loop's last token
    ASSERT_TRUE(t.ok()) << t.status();
    got.push_back(*t);
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(e.device().submit_count() - submits_before, 4u);
  EXPECT_EQ(e.position(), (*one)->position());
}

// Steps a loop ran past a stop are dropped by rewinding: decoding goes on as if the sequence had
// stopped there.
TEST(EngineBehaviour, RewindAfterAGpuLoopContinuesFromThere) {
  absl::StatusOr<test::HfReference> ref = test::LoadHfReference("llama");
  ASSERT_TRUE(ref.ok()) << ref.status();
  absl::StatusOr<std::vector<int32_t>> want = OneStepTokens(*ref, 9);
  ASSERT_TRUE(want.ok()) << want.status();
  auto looped = test::FixtureEngine(Fixture("llama"), graph::DType::kF32, 64, 32, "default", 6);
  ASSERT_TRUE(looped.ok()) << looped.status();
  runtime::Engine& e = **looped;
  ASSERT_TRUE(e.Prefill(ref->input_ids).ok());
  const int64_t start = e.position();
  absl::StatusOr<std::vector<int32_t>> loop = e.DecodeUpTo(6);
  ASSERT_TRUE(loop.ok()) << loop.status();
  ASSERT_EQ(loop->size(), 6u);
  // Keep the first two tokens: the second is the one the next step feeds.
  EXPECT_FALSE(e.Rewind(e.position() + 1, 0).ok());
  ASSERT_TRUE(e.Rewind(start + 2, (*loop)[1]).ok());
  std::vector<int32_t> got = {(*loop)[0], (*loop)[1]};
  absl::StatusOr<int32_t> next = e.DecodeNext();
  ASSERT_TRUE(next.ok()) << next.status();
  got.push_back(*next);
  absl::StatusOr<std::vector<int32_t>> more = e.DecodeUpTo(6);
  ASSERT_TRUE(more.ok()) << more.status();
  got.insert(got.end(), more->begin(), more->end());
  EXPECT_EQ(got, *want);
}

// Where more than one loop's tokens are wanted, the next loop is submitted before the current one's
// tokens are read (its steps follow on in the ring of token slots): the same tokens, one submit
// per loop; a rewind drops a loop started ahead, and decoding goes on from the rewound position.
TEST(EngineBehaviour, GpuLoopsStartedAheadDecodeWhatOneStepDecodingDoes) {
  absl::StatusOr<test::HfReference> ref = test::LoadHfReference("llama");
  ASSERT_TRUE(ref.ok()) << ref.status();
  absl::StatusOr<std::vector<int32_t>> want = OneStepTokens(*ref, 17);
  ASSERT_TRUE(want.ok()) << want.status();
  auto looped = test::FixtureEngine(Fixture("llama"), graph::DType::kF32, 64, 32, "default", 4);
  ASSERT_TRUE(looped.ok()) << looped.status();
  runtime::Engine& e = **looped;
  absl::StatusOr<int32_t> first = e.Prefill(ref->input_ids);
  ASSERT_TRUE(first.ok()) << first.status();
  const int64_t start = e.position();
  std::vector<int32_t> got;
  // 17 wanted: this loop and the next; then 13 and 9: one more ahead each; then 5: none.
  for (const auto& [wanted, submits] : {std::pair{17, 2u}, {13, 1u}, {9, 1u}, {5, 0u}}) {
    const uint64_t before = e.device().submit_count();
    absl::StatusOr<std::vector<int32_t>> t = e.DecodeUpTo(wanted);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ(t->size(), 4u);
    EXPECT_EQ(e.device().submit_count() - before, submits) << wanted;
    got.insert(got.end(), t->begin(), t->end());
  }
  absl::StatusOr<int32_t> last = e.DecodeNext();
  ASSERT_TRUE(last.ok()) << last.status();
  got.push_back(*last);
  EXPECT_EQ(got, *want);

  // A stop at the second token of a loop whose successor was started ahead.
  ASSERT_TRUE(e.Rewind(start, *first).ok());
  absl::StatusOr<std::vector<int32_t>> loop = e.DecodeUpTo(12);
  ASSERT_TRUE(loop.ok()) << loop.status();
  ASSERT_TRUE(e.Rewind(start + 2, (*loop)[1]).ok());
  EXPECT_EQ(e.position(), start + 2);
  absl::StatusOr<std::vector<int32_t>> more = e.DecodeUpTo(8);
  ASSERT_TRUE(more.ok()) << more.status();
  std::vector<int32_t> resumed = {(*loop)[0], (*loop)[1]};
  resumed.insert(resumed.end(), more->begin(), more->end());
  resumed.push_back(*e.DecodeNext());
  EXPECT_EQ(resumed, std::vector<int32_t>(want->begin(), want->begin() + 7));
  EXPECT_EQ(e.device().validation_messages(), 0);
}

// Sampling draws from the position and the seed, and the repeat penalty's history is a GPU state:
// the loop samples what one-step decoding samples.
TEST(EngineBehaviour, GpuLoopSamplesWhatOneStepDecodingSamples) {
  absl::StatusOr<test::HfReference> ref = test::LoadHfReference("llama");
  ASSERT_TRUE(ref.ok()) << ref.status();
  std::vector<std::vector<int32_t>> runs;
  for (int loop : {1, 4}) {
    runtime::EngineOptions o;
    o.model_path = Fixture("llama");
    o.weight_dtype = graph::DType::kF32;
    o.context = 64;
    o.prefill_chunk = 32;
    o.validation = true;
    o.gpu_loop = loop;
    o.sampling.temperature = 1.5;
    o.sampling.repeat_penalty = 1.3;
    o.sampling.seed = 11;
    absl::StatusOr<std::unique_ptr<runtime::Engine>> e = runtime::Engine::Create(o);
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_TRUE((*e)->Prefill(ref->input_ids).ok());
    std::vector<int32_t> tokens;
    while (tokens.size() < 16) {
      absl::StatusOr<std::vector<int32_t>> t = (*e)->DecodeUpTo(16 - static_cast<int64_t>(tokens.size()));
      ASSERT_TRUE(t.ok()) << t.status();
      tokens.insert(tokens.end(), t->begin(), t->end());
    }
    runs.push_back(tokens);
  }
  EXPECT_EQ(runs[0], runs[1]);
}

TEST(EngineBehaviour, IndependentDispatchesShareABarrier) {
  auto engine = test::FixtureEngine(Fixture("llama"), graph::DType::kF32);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const vk::PlanStats& s = (*engine)->prefill_plan().stats();
  // In a prefill step, after the fused QKV matmul, the k cache write (rotating k) and the v cache
  // write that attention appends read different parts of its output and write different buffers:
  // one barrier before the first, none between them.
  EXPECT_LT(s.barriers, s.dispatches);
  int unbarriered = 0;
  for (const vk::PlannedDispatch& d : (*engine)->prefill_plan().dispatches()) unbarriered += d.barrier_before ? 0 : 1;
  EXPECT_GE(unbarriered, (*engine)->config().num_layers);
}

TEST(EngineBehaviour, PromptLongerThanTheContextIsAnError) {
  auto engine = test::FixtureEngine(Fixture("llama"), graph::DType::kF16, /*context=*/16, /*prefill_chunk=*/8);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<int32_t> ids(17, 5);
  absl::StatusOr<int32_t> t = (*engine)->Prefill(ids);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("exceed the context size 16"), std::string::npos) << t.status();
  ids.resize(16);
  ASSERT_TRUE((*engine)->Prefill(ids).ok());
  absl::StatusOr<int32_t> next = (*engine)->DecodeNext();
  ASSERT_FALSE(next.ok());
  EXPECT_NE(next.status().message().find("context of 16 tokens is full"), std::string::npos) << next.status();
}

TEST(EngineBehaviour, TokenIdsOutsideTheVocabularyAreAnError) {
  auto engine = test::FixtureEngine(Fixture("llama"), graph::DType::kF16);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<int32_t> ids = {1, 512};
  absl::StatusOr<int32_t> t = (*engine)->Prefill(ids);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("token id 512 is outside the vocabulary [0, 512)"), std::string::npos);
}

// A copy of a fixture directory whose config.json is edited by `edit`.
std::filesystem::path EditedFixture(const std::string& name, const std::string& tag,
                                    const std::function<void(nlohmann::json&)>& edit) {
  std::filesystem::path dir = test::MakeTempDir(tag);
  std::filesystem::copy(Fixture(name), dir, std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
  nlohmann::json j = test::ReadJsonFile(dir / "config.json");
  edit(j);
  std::ofstream(dir / "config.json") << j.dump(2);
  return dir;
}

TEST(EngineBehaviour, UnknownArchitectureNamesTheSupportedOnes) {
  auto dir = EditedFixture("llama", "unknown_arch", [](nlohmann::json& j) { j["architectures"] = {"FooForCausalLM"}; });
  auto engine = test::FixtureEngine(dir, graph::DType::kF16);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("unsupported architecture 'FooForCausalLM'; supported: LlamaForCausalLM"),
            std::string::npos)
      << engine.status();
}

TEST(EngineBehaviour, ShapeThatContradictsTheConfigNamesTheTensor) {
  auto dir = EditedFixture("llama", "bad_shape", [](nlohmann::json& j) { j["intermediate_size"] = 300; });
  auto engine = test::FixtureEngine(dir, graph::DType::kF16);
  ASSERT_FALSE(engine.ok());
  // Checked against the checkpoint before the graph is built (checkpoints/checkpoint_check.h).
  const std::string message(engine.status().message());
  EXPECT_NE(message.find("tensor model.layers.0.mlp.down_proj.weight is [128, 256] but the config gives [128, 300] "
                         "(hidden_size, intermediate_size)"),
            std::string::npos)
      << message;
}

TEST(EngineBehaviour, MissingTensorIsNamed) {
  // Untying the embeddings makes the model ask for lm_head.weight, which the tied checkpoint lacks.
  auto dir = EditedFixture("llama_tied", "missing", [](nlohmann::json& j) { j["tie_word_embeddings"] = false; });
  auto engine = test::FixtureEngine(dir, graph::DType::kF16);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("lm_head.weight"), std::string::npos) << engine.status();
  EXPECT_NE(engine.status().message().find("model.safetensors"), std::string::npos) << engine.status();
}

TEST(EngineBehaviour, MissingModelDirectoryIsAnError) {
  auto engine = test::FixtureEngine("/nonexistent/model", graph::DType::kF16);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("/nonexistent/model"), std::string::npos) << engine.status();
}

}  // namespace
}  // namespace doppler
