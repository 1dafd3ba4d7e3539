// The batched engine end to end on the GPU (lavapipe in CI): the fixtures' four prompts decoded
// together, joining at once or at different steps with one leaving early, each giving its own
// reference greedy tokens and logits; random prompts giving in a batch exactly the tokens they give
// alone, whatever their neighbours do; and a shared prompt prefix giving the logits it gives
// unshared.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>

#include "backend_vk/plan.h"
#include "codegen/tuning/coop_rows.h"
#include "runtime/batch_engine.h"
#include "tests/support/engine_env.h"
#include "tests/support/fixtures.h"
#include "tests/support/reference.h"

namespace doppler {
namespace {

using runtime::BatchEngine;
using runtime::StepToken;

// f32 weights and cache, as the references compute.
runtime::EngineOptions Options(const std::string& model, int64_t chunk) {
  runtime::EngineOptions o = test::ReferenceEngineOptions(test::FixturesDir() / "hf" / model, chunk);
  o.weight_dtype = graph::DType::kF32;
  return o;
}

absl::StatusOr<std::unique_ptr<BatchEngine>> Engine(const std::string& model, int sequences, int64_t chunk = 8) {
  return BatchEngine::Create(Options(model, chunk), test::ReferenceBatchOptions(sequences));
}

// The llama fixture's engine (chunks of 8) with a budget of `budget` prompt tokens a step.
absl::StatusOr<std::unique_ptr<BatchEngine>> BudgetEngine(int sequences, int64_t budget) {
  runtime::BatchOptions b = test::ReferenceBatchOptions(sequences);
  b.prefill_budget = budget;
  return BatchEngine::Create(Options("llama", 8), b);
}

// Every token (and its logits) each sequence produced, by sequence id.
struct Produced {
  std::map<int, std::vector<int32_t>> tokens;
  std::map<int, std::vector<std::vector<float>>> logits;
  void Add(std::vector<StepToken>& step) {
    for (StepToken& t : step) {
      tokens[t.sequence].push_back(t.token);
      logits[t.sequence].push_back(std::move(t.logits));
    }
  }
};

// Checks sequence `id`'s tokens and logits against prompt `p` of the reference (as many as it made).
void ExpectMatches(const Produced& got, int id, const test::BatchReferencePrompt& p, int64_t vocab, double* worst) {
  const std::vector<int32_t>& tokens = got.tokens.at(id);
  ASSERT_LE(tokens.size(), p.greedy_tokens.size());
  EXPECT_EQ(tokens, std::vector<int32_t>(p.greedy_tokens.begin(), p.greedy_tokens.begin() + static_cast<std::ptrdiff_t>(tokens.size())));
  for (size_t j = 0; j < tokens.size(); ++j) {
    const double err = test::WorstRowError(got.logits.at(id)[j], &p.logits.data[j * static_cast<size_t>(vocab)], 1, vocab);
    *worst = std::max(*worst, err);
    EXPECT_LE(err, 1e-4) << "token " << j;
  }
}

class BatchFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchFixtureTest, PromptsJoiningTogetherGiveTheirOwnReference) {
  absl::StatusOr<std::vector<test::BatchReferencePrompt>> refs = test::LoadBatchReference(GetParam());
  ASSERT_TRUE(refs.ok()) << refs.status();
  auto engine = Engine(GetParam(), 4);
  ASSERT_TRUE(engine.ok()) << engine.status();
  BatchEngine& e = **engine;
  std::vector<int> ids;
  for (const auto& p : *refs) {
    absl::StatusOr<int> id = e.Add(p.input_ids, static_cast<int64_t>(p.greedy_tokens.size()), /*want_logits=*/true);
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  Produced got;
  for (int step = 0; step < 200 && e.running() > 0; ++step) {
    absl::StatusOr<std::vector<StepToken>> out = e.Step();
    ASSERT_TRUE(out.ok()) << out.status();
    got.Add(*out);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (got.tokens[ids[i]].size() == (*refs)[i].greedy_tokens.size()) e.Remove(ids[i]);
    }
  }
  double worst = 0;
  for (size_t i = 0; i < refs->size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "prompt " << i);
    ASSERT_EQ(got.tokens[ids[i]].size(), (*refs)[i].greedy_tokens.size());
    ExpectMatches(got, ids[i], (*refs)[i], e.config().vocab_size, &worst);
  }
  std::printf("[ %s batch ] worst row error %.3g (of max |logit|)\n", GetParam().c_str(), worst);
  EXPECT_EQ(e.device().validation_messages(), 0);
}

TEST_P(BatchFixtureTest, PromptsJoiningAtDifferentStepsWithOneLeavingEarly) {
  absl::StatusOr<std::vector<test::BatchReferencePrompt>> refs = test::LoadBatchReference(GetParam());
  ASSERT_TRUE(refs.ok()) << refs.status();
  auto engine = Engine(GetParam(), 4, 7);
  ASSERT_TRUE(engine.ok()) << engine.status();
  BatchEngine& e = **engine;
  std::map<int, size_t> prompt_of;
  auto add = [&](size_t i) {
    const auto& p = (*refs)[i];
    absl::StatusOr<int> id = e.Add(p.input_ids, static_cast<int64_t>(p.greedy_tokens.size()), true);
    ASSERT_TRUE(id.ok()) << id.status();
    prompt_of[*id] = i;
  };
  Produced got;
  // Prompt 2 first; 0 joins at step 3, 3 at step 6, 1 at step 9; prompt 2 leaves after 5 tokens.
  add(2);
  for (int step = 0; step < 200; ++step) {
    if (step == 3) add(0);
    if (step == 6) add(3);
    if (step == 9) add(1);
    absl::StatusOr<std::vector<StepToken>> out = e.Step();
    ASSERT_TRUE(out.ok()) << out.status();
    got.Add(*out);
    for (const auto& [id, i] : prompt_of) {
      if (i == 2 && got.tokens[id].size() == 5) e.Remove(id);
    }
    if (step > 9 && e.idle()) break;
    bool all_done = step > 9;
    for (const auto& [id, i] : prompt_of) {
      if (i != 2 && got.tokens[id].size() < (*refs)[i].greedy_tokens.size()) all_done = false;
    }
    if (all_done) break;
  }
  double worst = 0;
  for (const auto& [id, i] : prompt_of) {
    SCOPED_TRACE(::testing::Message() << "prompt " << i);
    ASSERT_EQ(got.tokens[id].size(), i == 2 ? 5u : (*refs)[i].greedy_tokens.size());
    ExpectMatches(got, id, (*refs)[i], e.config().vocab_size, &worst);
  }
  EXPECT_EQ(e.device().validation_messages(), 0);
}


// Greedy tokens of random prompts: decoded alone, then together with a neighbour whose tokens
// are replaced by random ones every step (as a high temperature would): the same tokens, in every
// family.
TEST_P(BatchFixtureTest, TokensDoNotDependOnTheNeighbours) {
  auto engine = Engine(GetParam(), 4);
  ASSERT_TRUE(engine.ok()) << engine.status();
  BatchEngine& e = **engine;
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t length : {3u, 11u, 20u}) {
    std::vector<int32_t> p(length);
    for (int32_t& t : p) t = static_cast<int32_t>(rng() % 256);
    prompts.push_back(p);
  }
  auto decode = [&](const std::vector<size_t>& which, bool noisy_neighbour) {
    std::map<int, size_t> of;
    for (size_t i : which) of[*e.Add(prompts[i], 10)] = i;
    int noisy = -1;
    if (noisy_neighbour) noisy = *e.Add(prompts[0], 30);
    std::vector<std::vector<int32_t>> out(prompts.size());
    for (int steps = 0; steps < 100; ++steps) {  // a step may only prefill, producing nothing
      absl::StatusOr<std::vector<StepToken>> step = e.Step();
      EXPECT_TRUE(step.ok()) << step.status();
      if (!step.ok()) break;
      bool done = true;
      for (const StepToken& t : *step) {
        if (t.sequence == noisy) {
          EXPECT_TRUE(e.SetNext(noisy, static_cast<int32_t>(rng() % 256)).ok());
        } else {
          out[of[t.sequence]].push_back(t.token);
        }
      }
      for (const auto& [id, i] : of) done = done && out[i].size() >= 10;
      if (done) break;
    }
    for (const auto& [id, i] : of) e.Remove(id);
    if (noisy >= 0) e.Remove(noisy);
    return out;
  };
  std::vector<std::vector<int32_t>> alone(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) alone[i] = decode({i}, false)[i];
  const std::vector<std::vector<int32_t>> together = decode({0, 1, 2}, true);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(together[i], alone[i]) << "prompt " << i;
    EXPECT_EQ(alone[i].size(), 10u);
  }
  EXPECT_EQ(e.device().validation_messages(), 0);
}

// Without logits, a step runs the GPU loop (8 decode steps in a submit, each feeding the next the
// tokens it chose): the same greedy tokens, several a step.
TEST_P(BatchFixtureTest, TheGpuLoopGivesTheReferenceTokens) {
  absl::StatusOr<std::vector<test::BatchReferencePrompt>> refs = test::LoadBatchReference(GetParam());
  ASSERT_TRUE(refs.ok()) << refs.status();
  auto engine = Engine(GetParam(), 4);
  ASSERT_TRUE(engine.ok()) << engine.status();
  BatchEngine& e = **engine;
  ASSERT_EQ(e.gpu_loop(), 8);
  std::vector<int> ids;
  for (const auto& p : *refs) {
    absl::StatusOr<int> id = e.Add(p.input_ids, static_cast<int64_t>(p.greedy_tokens.size()));
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  Produced got;
  size_t most_a_step = 0;
  for (int step = 0; step < 200 && e.running() > 0; ++step) {
    absl::StatusOr<std::vector<StepToken>> out = e.Step();
    ASSERT_TRUE(out.ok()) << out.status();
    std::map<int, size_t> a_step;
    for (const StepToken& t : *out) most_a_step = std::max(most_a_step, ++a_step[t.sequence]);
    got.Add(*out);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (got.tokens[ids[i]].size() == (*refs)[i].greedy_tokens.size()) e.Remove(ids[i]);
    }
  }
  EXPECT_EQ(most_a_step, 8u);
  for (size_t i = 0; i < refs->size(); ++i) EXPECT_EQ(got.tokens[ids[i]], (*refs)[i].greedy_tokens) << "prompt " << i;
  EXPECT_EQ(e.device().validation_messages(), 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BatchFixtureTest,
                         ::testing::Values("llama", "gemma3", "qwen2", "qwen3", "mistral", "phi3", "qwen3_moe",
                                           "mixtral", "gpt_oss"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// A prompt whose first pages another prompt already computed reuses them, and gives the logits
// it gives in an engine where nothing is shared.
TEST(BatchEngine, SharedPrefixGivesTheUnsharedLogits) {
  std::mt19937 rng(5);
  std::vector<int32_t> prefix(13), a, b;
  for (int32_t& t : prefix) t = static_cast<int32_t>(rng() % 256);
  a = b = prefix;
  a.insert(a.end(), {7, 8, 9});
  b.insert(b.end(), {40, 41});
  auto shared = Engine("llama", 2);
  ASSERT_TRUE(shared.ok()) << shared.status();
  auto fresh = Engine("llama", 2);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  auto first_tokens = [](BatchEngine& e, const std::vector<int32_t>& prompt) {
    Produced got;
    const int id = *e.Add(prompt, 4, true);
    for (int steps = 0; steps < 100 && got.tokens[id].size() < 4; ++steps) {
      absl::StatusOr<std::vector<StepToken>> step = e.Step();
      EXPECT_TRUE(step.ok()) << step.status();
      if (!step.ok()) break;
      got.Add(*step);
    }
    e.Remove(id);
    return got.logits[id];
  };
  (void)first_tokens(**shared, a);
  const std::vector<std::vector<float>> with = first_tokens(**shared, b);
  EXPECT_EQ((*shared)->shared_prompt_tokens(), 10);  // two whole pages of 5 rows of the 13 shared tokens
  const std::vector<std::vector<float>> without = first_tokens(**fresh, b);
  EXPECT_EQ((*fresh)->shared_prompt_tokens(), 0);
  ASSERT_EQ(with.size(), without.size());
  for (size_t j = 0; j < with.size(); ++j) {
    EXPECT_LE(test::WorstRowError(with[j], without[j].data(), 1, static_cast<int64_t>(without[j].size())), 1e-6);
  }
}

// A step prefills the joining prompts, oldest first, at most a chunk of each a plan, up to the
// budget of prompt tokens: with chunks of 8 and a budget of 16, the prompts of 1, 7, 19 and 33
// tokens that join together start in steps 1, 1, 3 and 4 — step 1 packs 1 + 7 + 8 rows into one
// mixed plan; step 2 decodes 2 rows beside 8 + 6 prompt rows, then packs 2 more; step 3 decodes 2
// beside 1 + 8, then prefills 8 of the last prompt alone; step 4 decodes 3 beside 8, then prefills
// its last 3 — and each still gives its reference.
TEST(BatchEngine, PrefillBudgetSpreadsABurstOverSteps) {
  absl::StatusOr<std::vector<test::BatchReferencePrompt>> refs = test::LoadBatchReference("llama");
  ASSERT_TRUE(refs.ok()) << refs.status();
  ASSERT_EQ(refs->size(), 4u);
  auto engine = BudgetEngine(4, 16);
  ASSERT_TRUE(engine.ok()) << engine.status();
  BatchEngine& e = **engine;
  std::vector<int> ids;
  for (const auto& p : *refs) {
    ASSERT_EQ(p.input_ids.size(), std::vector<size_t>({1, 7, 19, 33})[ids.size()]);
    absl::StatusOr<int> id = e.Add(p.input_ids, static_cast<int64_t>(p.greedy_tokens.size()), /*want_logits=*/true);
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  Produced got;
  std::map<int, int> first_step;
  for (int step = 1; step <= 40 && !e.idle(); ++step) {
    absl::StatusOr<std::vector<StepToken>> out = e.Step();
    ASSERT_TRUE(out.ok()) << out.status();
    for (const StepToken& t : *out) first_step.emplace(t.sequence, step);
    got.Add(*out);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (got.tokens[ids[i]].size() == (*refs)[i].greedy_tokens.size()) e.Remove(ids[i]);  // (again: a no-op)
    }
  }
  EXPECT_EQ(first_step, (std::map<int, int>{{ids[0], 1}, {ids[1], 1}, {ids[2], 3}, {ids[3], 4}}));
  double worst = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    ExpectMatches(got, ids[i], (*refs)[i], e.config().vocab_size, &worst);
    EXPECT_EQ(got.tokens[ids[i]].size(), (*refs)[i].greedy_tokens.size());
  }
  EXPECT_EQ(e.device().validation_messages(), 0);
}

// A server prepares every plan its steps take before it reports ready (a plan compiled in a step
// holds up every running request): here a step packing two prompts' chunks (8 + 8 rows) leaves a
// budget of one row, which the next mixed step takes alone (a plan of one row).
TEST(BatchEngine, ServingStepsCompileNoPlanAfterPrepare) {
  absl::StatusOr<std::vector<test::BatchReferencePrompt>> refs = test::LoadBatchReference("llama");
  ASSERT_TRUE(refs.ok()) << refs.status();
  ASSERT_EQ(refs->size(), 4u);
  auto engine = BudgetEngine(2, 17);
  ASSERT_TRUE(engine.ok()) << engine.status();
  BatchEngine& e = **engine;
  ASSERT_TRUE(e.Prepare(2, /*serving=*/true).ok());
  const int prepared = e.plans_compiled();
  Produced got;
  std::vector<int> ids;
  for (size_t i : {2u, 3u}) {
    absl::StatusOr<int> id = e.Add((*refs)[i].input_ids, static_cast<int64_t>((*refs)[i].greedy_tokens.size()), true);
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  for (int step = 0; step < 40 && !e.idle(); ++step) {
    absl::StatusOr<std::vector<StepToken>> out = e.Step();
    ASSERT_TRUE(out.ok()) << out.status();
    got.Add(*out);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (got.tokens[ids[i]].size() == (*refs)[i + 2].greedy_tokens.size()) e.Remove(ids[i]);
    }
  }
  EXPECT_EQ(e.plans_compiled(), prepared);
  double worst = 0;
  for (size_t i = 0; i < ids.size(); ++i) ExpectMatches(got, ids[i], (*refs)[i + 2], e.config().vocab_size, &worst);
  EXPECT_EQ(e.device().validation_messages(), 0);
}

// A prompt and generation that cannot fit the context or the pool is refused, naming it; a pool
// with room for one sequence at a time admits the second when the first leaves.
TEST(BatchEngine, FullPoolMakesSequencesWait) {
  runtime::BatchOptions b = test::ReferenceBatchOptions(2);
  b.ctx_total = 40;  // 8 pages of 5 rows
  auto engine = BatchEngine::Create(Options("llama", 8), b);
  ASSERT_TRUE(engine.ok()) << engine.status();
  BatchEngine& e = **engine;
  const std::vector<int32_t> prompt(20, 5);
  absl::StatusOr<int> too_long = e.Add(prompt, 60);
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kOutOfRange);
  absl::StatusOr<int> too_big = e.Add(prompt, 30);  // 49 positions: 10 pages of a pool of 8
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  const int first = *e.Add(prompt, 16);  // 7 pages
  const int second = *e.Add(prompt, 16);
  EXPECT_EQ(e.waiting(), 1);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(e.Step().ok());
  EXPECT_EQ(e.waiting(), 1);
  e.Remove(first);
  EXPECT_EQ(e.waiting(), 0);
  e.Remove(second);
}

// With a window on every layer (Mistral's 12), the pages the window has left go back to the pool:
// a pool of 5 pages of 5 rows holds a window and a chunk of 8, so the prompt of 33 tokens and its
// 16 tokens (48 positions, 10 pages) run in it and give the reference; a second such sequence
// waits for the room.
TEST(BatchEngine, SlidingWindowPagesAreRecycled) {
  absl::StatusOr<std::vector<test::BatchReferencePrompt>> refs = test::LoadBatchReference("mistral");
  ASSERT_TRUE(refs.ok()) << refs.status();
  runtime::BatchOptions b = test::ReferenceBatchOptions(2);
  b.ctx_total = 25;
  auto engine = BatchEngine::Create(Options("mistral", 8), b);
  ASSERT_TRUE(engine.ok()) << engine.status();
  BatchEngine& e = **engine;
  const test::BatchReferencePrompt& p = (*refs)[3];
  ASSERT_EQ(p.input_ids.size(), 33u);
  absl::StatusOr<int> first = e.Add(p.input_ids, static_cast<int64_t>(p.greedy_tokens.size()), true);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<int> second = e.Add(p.input_ids, static_cast<int64_t>(p.greedy_tokens.size()), true);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(e.waiting(), 1);  // the pool holds one window at a time
  Produced got;
  for (int step = 0; step < 100 && got.tokens[*first].size() < p.greedy_tokens.size(); ++step) {
    absl::StatusOr<std::vector<StepToken>> out = e.Step();
    ASSERT_TRUE(out.ok()) << out.status();
    got.Add(*out);
  }
  double worst = 0;
  ExpectMatches(got, *first, p, e.config().vocab_size, &worst);
  EXPECT_EQ(got.tokens[*first].size(), p.greedy_tokens.size());
  e.Remove(*first);
  EXPECT_EQ(e.waiting(), 0);
  e.Remove(*second);
  EXPECT_EQ(e.pool_usage(), 0.0);
  EXPECT_EQ(e.device().validation_messages(), 0);
}

// Decode buckets up to 16 rows take the graph with x_quant but for those the cooperative-matrix
// variant for few rows takes (codegen/tuning/coop_rows.h: from 4 or 8 rows where the device has
// cooperative matrices), which take the graph without it, as larger buckets do; a bad
// coop_rows.from is an error naming it.
TEST(BatchEngine, DecodeBucketsTakeTheGraphTheirMatmulsNeed) {
  unsetenv("DOPPLER_TUNE");
  auto engine = Engine("llama", 2);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const BatchEngine& e = **engine;
  absl::StatusOr<codegen::tuning::DeviceChoice> from = codegen::tuning::CoopRowsFrom(vk::TargetCapsOf(e.device().info()));
  ASSERT_TRUE(from.ok()) << from.status();
  const graph::Graph* q8 = &e.decode_graph(1);
  const graph::Graph* plain = &e.decode_graph(runtime::kQ8MaxRows + 1);
  EXPECT_NE(q8, plain);
  for (int rows = 2; rows <= runtime::kQ8MaxRows; ++rows) {
    EXPECT_EQ(&e.decode_graph(rows), codegen::tuning::CoopRowsTakeBatchedDecode(rows, from->value) ? plain : q8) << rows;
  }
  setenv("DOPPLER_TUNE", "coop_rows.from=1", 1);
  auto bad = Engine("llama", 2);
  unsetenv("DOPPLER_TUNE");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("coop_rows.from=1"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace doppler
