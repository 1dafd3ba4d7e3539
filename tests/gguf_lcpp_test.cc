// Every family as llama.cpp's own converter writes it (gguf/lcpp/NAME-lcpp-f32.gguf, f32 tensors),
// run with an f32 KV cache, on the GPU and on the interpreter, against transformers' references
// for hf/NAME (Mixtral: llama.cpp's llama with stacked experts): the GGUF computes the
// same function, so prefill and decode logits agree to the fixture tolerance and the greedy
// tokens are the same; except where the file describes less than the HF config (the fixtures
// README): Mistral's file has no sliding window, so only the positions below the window are
// comparable there. Gemma 3's file says neither hf/gemma3's layer pattern nor its query scale
// (query_pre_attn_scalar 48, head size 64), so it is checked against the HF model with what
// llama.cpp assumes in their place.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "checkpoints/weights.h"
#include "formats/hf_config.h"
#include "gmock/gmock.h"
#include "graph/interpreter.h"
#include "nlohmann/json.hpp"
#include "runtime/engine.h"
#include "runtime/model_source.h"
#include "runtime/token_choice.h"
#include "tests/support/engine_env.h"
#include "tests/support/fixtures.h"
#include "tests/support/reference.h"
#include "tests/support/reference_logits.h"

namespace doppler {
namespace {

struct Case {
  std::string model;
  // False: the file lacks the HF config's attention pattern, so only the prefill rows below the
  // HF config's sliding window are comparable.
  bool same_function;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) { return info.param.model; }
void PrintTo(const Case& c, std::ostream* os) { *os << c.model; }

class GgufLcppTest : public ::testing::TestWithParam<Case> {};

TEST_P(GgufLcppTest, LogitsMatchTransformers) {
  const Case& c = GetParam();
  absl::StatusOr<test::HfReference> ref = test::LoadHfReference(c.model);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const runtime::EngineOptions o =
      test::ReferenceEngineOptions(test::FixturesDir() / "gguf" / "lcpp" / (c.model + "-lcpp-f32.gguf"));
  absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  runtime::Engine& e = **engine;
  const int64_t n = static_cast<int64_t>(ref->input_ids.size());
  int64_t rows = n;
  if (!c.same_function) {
    absl::StatusOr<formats::ModelConfig> hf = formats::ReadHfConfig(ref->dir / "config.json");
    ASSERT_TRUE(hf.ok()) << hf.status();
    ASSERT_TRUE(hf->sliding_window.has_value());
    rows = std::min<int64_t>(n, *hf->sliding_window);
  }

  // The decode steps only where the file computes the same function as the reference.
  const std::vector<int32_t> steps = c.same_function ? ref->greedy_tokens : std::vector<int32_t>{};
  absl::StatusOr<test::ReferenceLogits> run = test::CompareWithReference(
      e, ref->input_ids, steps, ref->prefill_logits.data.data(), ref->decode_logits.data.data(), rows);
  ASSERT_TRUE(run.ok()) << run.status();
  std::printf("[ %s ] worst row error over %lld prefill rows: %.3g (of max |logit|)\n", c.model.c_str(),
              static_cast<long long>(rows), run->prefill_error);
  EXPECT_LE(run->prefill_error, 1e-4);
  if (c.same_function) {
    std::printf("[ %s ] decode worst row error %.3g\n", c.model.c_str(), run->decode_error);
    EXPECT_LE(run->decode_error, 1e-4);
    absl::StatusOr<std::vector<int32_t>> generated = test::Generate(e, ref->input_ids, ref->greedy_tokens.size());
    ASSERT_TRUE(generated.ok()) << generated.status();
    EXPECT_EQ(*generated, ref->greedy_tokens);
  }
  EXPECT_EQ(e.device().validation_messages(), 0);
}

// The CPU reference interpreter on the file, opened as the engine opens it, on the model's own
// graph and on the fused one (a mixture of experts' stacked ffn_gate_exps / ffn_up_exps then read
// as one gated product, expert by expert).
TEST_P(GgufLcppTest, InterpreterMatchesTransformers) {
  const Case& c = GetParam();
  absl::StatusOr<test::HfReference> ref = test::LoadHfReference(c.model);
  ASSERT_TRUE(ref.ok()) << ref.status();
  runtime::EngineOptions o =
      test::ReferenceEngineOptions(test::FixturesDir() / "gguf" / "lcpp" / (c.model + "-lcpp-f32.gguf"));
  absl::StatusOr<runtime::OpenedModel> m = runtime::OpenModel(o);
  ASSERT_TRUE(m.ok()) << m.status();
  const int64_t n = static_cast<int64_t>(ref->input_ids.size()), vocab = m->config.vocab_size;
  m->build.logits_all_tokens = true;
  m->build.max_step_tokens = n;
  int64_t rows = n;
  if (!c.same_function) {
    absl::StatusOr<formats::ModelConfig> hf = formats::ReadHfConfig(ref->dir / "config.json");
    ASSERT_TRUE(hf.ok()) << hf.status();
    rows = std::min<int64_t>(n, hf->sliding_window.value_or(n));
  }
  checkpoints::StoreParamSource params(*m->store);
  for (const char* pipeline : {"none", "default"}) {
    absl::StatusOr<graph::Graph> g = runtime::StepGraph(m->config, m->build, runtime::SamplingOptions{}, pipeline);
    ASSERT_TRUE(g.ok()) << g.status();
    graph::Interpreter interp(params);
    auto out = interp.Run(*g, {{"ids", graph::Tensor::I32({n}, ref->input_ids)}}, 0);
    ASSERT_TRUE(out.ok()) << out.status();
    const double prefill_err = test::WorstRowError(out->at("logits").f, ref->prefill_logits.data.data(), rows, vocab);
    EXPECT_LE(prefill_err, 1e-4) << pipeline;
    double decode_err = 0.0;
    for (size_t i = 0; c.same_function && i < ref->greedy_tokens.size(); ++i) {
      auto step = interp.Run(*g, {{"ids", graph::Tensor::I32({1}, {ref->greedy_tokens[i]})}}, n + static_cast<int64_t>(i));
      ASSERT_TRUE(step.ok()) << step.status();
      decode_err = std::max(decode_err, test::WorstRowError(step->at("logits").f, &ref->decode_logits.data[i * vocab], 1, vocab));
      const int32_t want = i + 1 < ref->greedy_tokens.size() ? ref->greedy_tokens[i + 1] : ref->next_token_after_greedy;
      EXPECT_EQ(step->at("next_token").i[0], want) << pipeline << ", decode step " << i;
    }
    EXPECT_LE(decode_err, 1e-4) << pipeline;
    std::printf("[ %s interpreter, passes %s ] worst row error: prefill %.3g, decode %.3g (of max |logit|)\n",
                c.model.c_str(), pipeline, prefill_err, decode_err);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufLcppTest,
                         ::testing::Values(Case{"llama", true}, Case{"qwen2", true}, Case{"qwen3", true}, Case{"phi3", true},
                                           Case{"mistral", false}, Case{"mixtral", true}),
                         CaseName);

// llama.cpp's Mixtral is a llama file with experts: read as the Mixtral family, its stacked experts
// loaded as they are (one param per layer and matrix, no per-expert tensors) and, once fused, gate
// and up read as one gated product over row slices of the stored tensors.
TEST(GgufLcppTest, MixtralIsReadWithItsExpertsStacked) {
  runtime::EngineOptions o = test::ReferenceEngineOptions(test::FixturesDir() / "gguf" / "lcpp" / "mixtral-lcpp-f32.gguf");
  absl::StatusOr<runtime::OpenedModel> m = runtime::OpenModel(o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->config.architecture, "MixtralForCausalLM");
  EXPECT_EQ(m->config.raw["num_local_experts"], 4);
  EXPECT_EQ(m->config.raw["num_experts_per_tok"], 2);
  absl::StatusOr<graph::Graph> g = runtime::StepGraph(m->config, m->build, runtime::SamplingOptions{}, "none");
  ASSERT_TRUE(g.ok()) << g.status();
  int stacked = 0;
  for (const graph::Node& n : g->nodes()) {
    EXPECT_NE(n.kind, graph::OpKind::kConcatRows) << n.label;
    if (n.kind == graph::OpKind::kParam && n.attrs.Str("name").find(".experts.w") != std::string::npos) {
      ++stacked;
      EXPECT_EQ(n.type.shape[1].value * n.type.shape[0].value, 4 * 96 * 128) << n.attrs.Str("name");
    }
  }
  EXPECT_EQ(stacked, 2 * 3);  // two layers' w1, w3, w2
  absl::StatusOr<graph::Graph> fused = runtime::StepGraph(m->config, m->build, runtime::SamplingOptions{}, "default");
  ASSERT_TRUE(fused.ok()) << fused.status();
  int gated = 0;
  for (const graph::Node& n : fused->nodes()) {
    if (n.kind != graph::OpKind::kExpertMatMul || !n.attrs.Has("epilogue")) continue;
    ++gated;
    const graph::Node& w = fused->node(n.inputs[1]);
    ASSERT_EQ(w.kind, graph::OpKind::kConcatRows);
    ASSERT_EQ(w.inputs.size(), 8u);  // [w1_e | w3_e] for each of the 4 experts
    const graph::Node& up1 = fused->node(w.inputs[3]);
    EXPECT_THAT(up1.attrs.Str("source"), ::testing::EndsWith(".block_sparse_moe.experts.w3.weight"));
    EXPECT_EQ(up1.attrs.Int("row_offset"), 96);
  }
  EXPECT_EQ(gated, 2);
}

// prefill logits, 16 decode steps' logits and greedy tokens of an engine on `model`.
struct EngineRun {
  std::vector<float> prefill, decode;
  std::vector<int32_t> greedy;
};

EngineRun RunF32(const std::filesystem::path& model, const test::HfReference& ref) {
  EngineRun r;
  runtime::EngineOptions o = test::ReferenceEngineOptions(model);
  o.weight_dtype = graph::DType::kF32;
  absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(o);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return r;
  absl::StatusOr<std::vector<float>> prefill = (*engine)->PrefillLogits(ref.input_ids);
  EXPECT_TRUE(prefill.ok()) << prefill.status();
  if (!prefill.ok()) return r;
  r.prefill = *prefill;
  for (int32_t t : ref.greedy_tokens) {
    absl::StatusOr<std::vector<float>> row = (*engine)->DecodeLogits(t);
    EXPECT_TRUE(row.ok()) << row.status();
    if (!row.ok()) return r;
    r.decode.insert(r.decode.end(), row->begin(), row->end());
  }
  absl::StatusOr<std::vector<int32_t>> greedy = test::Generate(**engine, ref.input_ids, ref.greedy_tokens.size());
  EXPECT_TRUE(greedy.ok()) << greedy.status();
  if (greedy.ok()) r.greedy = *greedy;
  EXPECT_EQ((*engine)->device().validation_messages(), 0);
  return r;
}

// llama.cpp's reading of the Gemma 3 file: every 6th layer global and queries scaled by
// 1/sqrt(head size). hf/gemma3's weights with exactly that config (the HF path, itself checked
// against transformers in engine_fixture_test) must give the GGUF's logits; the file's
// stored norm weights (w + 1) and local rope base are what make them agree.
TEST(GgufLcppTest, Gemma3RunsAsLlamaCppReadsIt) {
  absl::StatusOr<test::HfReference> ref = test::LoadHfReference("gemma3");
  ASSERT_TRUE(ref.ok()) << ref.status();
  const std::filesystem::path dir = test::MakeTempDir("gemma3_as_llamacpp");
  nlohmann::json config = test::ReadJsonFile(ref->dir / "config.json");
  config.erase("layer_types");
  config["sliding_window_pattern"] = 6;
  config["query_pre_attn_scalar"] = config["head_dim"];
  std::ofstream(dir / "config.json") << config.dump();
  std::filesystem::create_symlink(ref->dir / "model.safetensors", dir / "model.safetensors");

  const EngineRun gguf = RunF32(test::FixturesDir() / "gguf" / "lcpp" / "gemma3-lcpp-f32.gguf", *ref);
  const EngineRun hf = RunF32(dir, *ref);
  const int64_t vocab = static_cast<int64_t>(hf.prefill.size() / ref->input_ids.size());
  ASSERT_EQ(gguf.prefill.size(), hf.prefill.size());
  ASSERT_EQ(gguf.decode.size(), hf.decode.size());
  const double prefill_err = test::WorstRowError(gguf.prefill, hf.prefill.data(), static_cast<int64_t>(ref->input_ids.size()), vocab);
  const double decode_err = test::WorstRowError(gguf.decode, hf.decode.data(), static_cast<int64_t>(ref->greedy_tokens.size()), vocab);
  std::printf("[ gemma3 ] GGUF vs HF with llama.cpp's assumptions: prefill %.3g, decode %.3g\n", prefill_err, decode_err);
  EXPECT_LE(prefill_err, 1e-4);
  EXPECT_LE(decode_err, 1e-4);
  EXPECT_EQ(gguf.greedy, hf.greedy);
  // And the file is not hf/gemma3 (the README's exception): its logits differ from transformers'.
  EXPECT_GT(test::WorstRowError(gguf.prefill, ref->prefill_logits.data.data(), static_cast<int64_t>(ref->input_ids.size()), vocab), 1e-2);
}

}  // namespace
}  // namespace doppler
