// Synthetic models (models/synthetic.h), doppler bench and its --profile report.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

#include "graph/dtype.h"
#include "models/synthetic.h"
#include "nlohmann/json.hpp"
#include "quant/float_codec.h"
#include "runtime/engine.h"
#include "support/cli_runner.h"
#include "support/fixtures.h"

namespace doppler {
namespace {

using graph::DType;

uint64_t Params(const std::string& name) {
  absl::StatusOr<formats::ModelConfig> c = models::SyntheticConfig(name);
  EXPECT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::unique_ptr<models::SyntheticWeightStore>> s =
      models::SyntheticWeightStore::Create(name, *c, DType::kF16, quant::QuantScheme::kNone);
  EXPECT_TRUE(s.ok()) << s.status();
  return (*s)->TotalParameters();
}

TEST(SyntheticTest, ShapesAreThePublishedOnes) {
  // Published parameter counts (embedding counted once when tied).
  EXPECT_NEAR(static_cast<double>(Params("llama-3.2-1b")), 1.236e9, 0.005e9);
  EXPECT_NEAR(static_cast<double>(Params("qwen3-0.6b")), 0.596e9, 0.005e9);
  EXPECT_NEAR(static_cast<double>(Params("llama-3.1-8b")), 8.03e9, 0.01e9);
  EXPECT_NEAR(static_cast<double>(Params("qwen2.5-1.5b")), 1.54e9, 0.01e9);
  EXPECT_NEAR(static_cast<double>(Params("gemma-3-1b")), 1.0e9, 0.01e9);
  EXPECT_NEAR(static_cast<double>(Params("llama-3.2-3b")), 3.21e9, 0.01e9);
  // Mixtures of experts: every expert counted (Qwen3-30B-A3B 30.5B, Mixtral 8x7B 46.7B).
  EXPECT_NEAR(static_cast<double>(Params("qwen3-30b-a3b")), 30.53e9, 0.05e9);
  EXPECT_NEAR(static_cast<double>(Params("mixtral-8x7b")), 46.70e9, 0.05e9);
  // GPT-OSS-20B: 20.9B (OpenAI's model card: 20.91B with the embedding and the head).
  EXPECT_NEAR(static_cast<double>(Params("gpt-oss-20b")), 20.91e9, 0.05e9);

  absl::StatusOr<formats::ModelConfig> g = models::SyntheticConfig("gemma-3-1b");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->hidden_size, 1152);
  EXPECT_EQ(g->vocab_size, 262144);
  EXPECT_EQ(g->head_dim, 256);
  EXPECT_EQ(g->num_kv_heads, 1);
  EXPECT_EQ(g->sliding_window, 512);
  ASSERT_TRUE(g->rope_local.has_value());
  EXPECT_FLOAT_EQ(g->rope_local->theta, 10000.0f);
  absl::StatusOr<formats::ModelConfig> l = models::SyntheticConfig("llama-3.1-8b");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->intermediate_size, 14336);
  EXPECT_EQ(l->rope.scaling.type, "llama3");
  EXPECT_FLOAT_EQ(l->rope.scaling.factor, 8.0f);
  EXPECT_FALSE(l->tie_word_embeddings);
}

TEST(SyntheticTest, UnknownNameListsTheKnownOnes) {
  absl::StatusOr<formats::ModelConfig> c = models::SyntheticConfig("llama-9");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("llama-3.2-1b"), std::string::npos) << c.status();
  EXPECT_NE(std::string(c.status().message()).find("gemma-3-1b"), std::string::npos);
}

TEST(SyntheticTest, BlocksDecodeToFiniteValuesOfTheIntendedSpread) {
  absl::StatusOr<formats::ModelConfig> c = models::SyntheticConfig("llama-3.2-1b");
  ASSERT_TRUE(c.ok());
  absl::StatusOr<std::unique_ptr<models::SyntheticWeightStore>> s =
      models::SyntheticWeightStore::Create("llama-3.2-1b", *c, DType::kF16, quant::QuantScheme::kQ4_K_M);
  ASSERT_TRUE(s.ok());
  // Q4_K_M: Q4_K for q_proj, Q6_K for the first layers' down_proj and for the tied embedding/head.
  EXPECT_EQ((*s)->DTypeOf("model.layers.5.self_attn.q_proj.weight", DType::kF16), DType::kQ4_K);
  EXPECT_EQ((*s)->DTypeOf("model.layers.0.mlp.down_proj.weight", DType::kF16), DType::kQ6_K);
  EXPECT_EQ((*s)->DTypeOf("model.layers.0.input_layernorm.weight", DType::kF16), DType::kF32);
  for (const char* name : {"model.layers.5.self_attn.q_proj.weight", "model.layers.0.mlp.down_proj.weight"}) {
    absl::StatusOr<formats::TensorView> t = (*s)->Get(name);
    ASSERT_TRUE(t.ok()) << t.status();
    const std::vector<float> v = quant::DecodeFloats(t->dtype, {t->data, t->nbytes});
    ASSERT_EQ(static_cast<int64_t>(v.size()), t->shape[0] * t->shape[1]);
    double sum = 0, sq = 0;
    for (float x : v) {
      ASSERT_TRUE(std::isfinite(x));
      sum += x;
      sq += static_cast<double>(x) * x;
    }
    const double mean = sum / v.size(), sd = std::sqrt(sq / v.size() - mean * mean);
    const double want = 1.0 / std::sqrt(static_cast<double>(t->shape[1]));
    EXPECT_LT(std::abs(mean), 0.1 * want) << name;
    EXPECT_NEAR(sd, want, 0.35 * want) << name;
  }
  // Deterministic: the same seed gives the same bytes.
  absl::StatusOr<std::unique_ptr<models::SyntheticWeightStore>> again =
      models::SyntheticWeightStore::Create("llama-3.2-1b", *c, DType::kF16, quant::QuantScheme::kQ4_K_M);
  ASSERT_TRUE(again.ok());
  absl::StatusOr<formats::TensorView> a = (*s)->Get("model.layers.5.self_attn.q_proj.weight");
  absl::StatusOr<formats::TensorView> b = (*again)->Get("model.layers.5.self_attn.q_proj.weight");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->nbytes, b->nbytes);
  EXPECT_EQ(0, std::memcmp(a->data, b->data, a->nbytes));
}

// Every block format's random blocks decode to finite values of mean ~0 and the asked spread, and
// --quant q4_0 / iq4_xs put their type in the matrices.
TEST(SyntheticTest, EveryBlockFormatHasTheIntendedSpread) {
  const int64_t rows = 64, cols = 512;
  const float stddev = 0.05f;
  for (DType t : {DType::kQ8_0, DType::kQ5_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ4_0, DType::kQ4_1,
                  DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4}) {
    std::vector<uint8_t> bytes(graph::ByteSize(t, rows * cols));
    models::FillRandom(t, rows, cols, 7, 0.0f, stddev, bytes.data());
    const std::vector<float> v = quant::DecodeFloats(t, bytes);
    ASSERT_EQ(static_cast<int64_t>(v.size()), rows * cols) << graph::Name(t);
    double sum = 0, sq = 0;
    for (float x : v) {
      ASSERT_TRUE(std::isfinite(x)) << graph::Name(t);
      sum += x;
      sq += static_cast<double>(x) * x;
    }
    const double mean = sum / v.size(), sd = std::sqrt(sq / v.size() - mean * mean);
    EXPECT_LT(std::abs(mean), 0.1 * stddev) << graph::Name(t);
    EXPECT_NEAR(sd, stddev, 0.35 * stddev) << graph::Name(t);
  }
  absl::StatusOr<formats::ModelConfig> c = models::SyntheticConfig("llama-3.2-1b");
  ASSERT_TRUE(c.ok());
  for (auto [scheme, dtype] : {std::pair{quant::QuantScheme::kQ4_0, DType::kQ4_0}, std::pair{quant::QuantScheme::kIQ4_XS, DType::kIQ4_XS}}) {
    absl::StatusOr<std::unique_ptr<models::SyntheticWeightStore>> s =
        models::SyntheticWeightStore::Create("llama-3.2-1b", *c, DType::kF16, scheme);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ((*s)->DTypeOf("model.layers.5.self_attn.q_proj.weight", DType::kF16), dtype);
    EXPECT_EQ((*s)->DTypeOf("model.embed_tokens.weight", DType::kF16), DType::kQ6_K);  // tied: the LM head
  }
}

TEST(SyntheticTest, TinyRunsThroughTheEngineWithFiniteLogits) {
  for (const char* quant : {"none", "q8_0"}) {
    runtime::EngineOptions o;
    o.synthetic = "tiny";
    o.context = 32;
    o.prefill_chunk = 8;
    o.validation = true;
    if (std::string(quant) == "q8_0") o.quant = quant::QuantScheme::kQ8_0;
    absl::StatusOr<std::unique_ptr<runtime::Engine>> e = runtime::Engine::Create(o);
    ASSERT_TRUE(e.ok()) << e.status();
    const int32_t ids[] = {1, 5, 9, 200};
    absl::StatusOr<std::vector<float>> logits = (*e)->PrefillLogits(ids);
    ASSERT_TRUE(logits.ok()) << logits.status();
    ASSERT_EQ(logits->size(), 4u * 256u);
    for (float x : *logits) ASSERT_TRUE(std::isfinite(x)) << quant;
    EXPECT_EQ((*e)->device().validation_messages(), 0);
  }
}

TEST(BenchTest, PrintsEveryField) {
  const test::CommandResult r = test::RunDoppler("bench --synthetic tiny -p 16 -n 8 -r 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* field : {"model: tiny (synthetic)", "device:", "pp16:", "tg8:", "tok/s", "ttft (p=16):",
                            "decode latency: p50", "p99", "peak vram:",
                            "per decode token: 0.12 submits (a GPU loop of 8 steps)",
                            "dispatches", "copy bandwidth:", "bandwidth floor:", "of the floor"}) {
    EXPECT_NE(r.out.find(field), std::string::npos) << field << "\n" << r.out;
  }
  EXPECT_NE(r.out.find("tok/s (greedy)"), std::string::npos) << r.out;
}

// --temp above 0 samples in the decode test, through the sampler's kernel; the settings are
// in the output. A bad value is an error naming the option.
TEST(BenchTest, DecodesWithTheSampler) {
  test::CommandResult r =
      test::RunDoppler("bench --synthetic tiny -p 8 -n 8 -r 1 --json --profile --temp 0.7 --top-k 20");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_DOUBLE_EQ(j["sampling"]["temperature"].get<double>(), 0.7);
  EXPECT_EQ(j["sampling"]["top_k"].get<int>(), 20);
  EXPECT_DOUBLE_EQ(j["sampling"]["top_p"].get<double>(), 0.95);  // run's defaults
  EXPECT_DOUBLE_EQ(j["sampling"]["min_p"].get<double>(), 0.05);
  bool sampler = false;
  for (const nlohmann::json& n : j["profile"]["nodes"]) {
    sampler = sampler || n["kernel"].get<std::string>().rfind("sample.", 0) == 0;
  }
  EXPECT_TRUE(sampler) << j["profile"].dump();
  r = test::RunDoppler("bench --synthetic tiny -p 8 -n 8 -r 1 --temp 0.7");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("tok/s (sampled: temperature 0.7, top-k 40, top-p 0.95, min-p 0.05)"), std::string::npos) << r.out;
  r = test::RunDoppler("bench --synthetic tiny -p 8 -n 8 -r 1 --top-p 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--top-p must be in (0, 1]"), std::string::npos) << r.err;
}

TEST(BenchTest, JsonHasTheDocumentedKeys) {
  const test::CommandResult r = test::RunDoppler("bench --synthetic tiny --quant q8_0 -p 8 -n 8 -r 2 --json --gpu-loop 4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  for (const char* key : {"model", "quant", "device", "params", "model_bytes", "weight_bytes_per_token", "p", "n", "n_depth", "r",
                          "pp_tok_s", "tg_tok_s", "ttft_ms", "decode_ms", "vram_bytes", "submits_per_token",
                          "gpu_loop", "dispatches_per_token", "barriers_per_token", "copy_bandwidth_gb_s", "floor_tok_s",
                          "tg_floor_pct"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_GT(j["tg_tok_s"]["mean"].get<double>(), 0);
  EXPECT_GT(j["pp_tok_s"]["mean"].get<double>(), 0);
  EXPECT_GE(j["tg_tok_s"]["sd"].get<double>(), 0);
  EXPECT_GE(j["decode_ms"]["p99"].get<double>(), j["decode_ms"]["p50"].get<double>());
  EXPECT_EQ(j["gpu_loop"].get<int>(), 4);
  EXPECT_DOUBLE_EQ(j["submits_per_token"].get<double>(), 0.25);  // 8 tokens in two loops
  EXPECT_GT(j["vram_bytes"].get<uint64_t>(), j["model_bytes"].get<uint64_t>());
  EXPECT_GT(j["copy_bandwidth_gb_s"].get<double>(), 0);
  EXPECT_FALSE(j.contains("profile"));
  // One entry per repetition, whose mean is the reported mean.
  for (const char* key : {"pp_tok_s", "tg_tok_s", "ttft_ms"}) {
    const nlohmann::json& reps = j["per_repetition"][key];
    ASSERT_EQ(reps.size(), 2u) << key;
    EXPECT_NEAR((reps[0].get<double>() + reps[1].get<double>()) / 2, j[key]["mean"].get<double>(),
                1e-9 * j[key]["mean"].get<double>())
        << key;
  }
}

// -d N starts each test from a cache holding N tokens (filled once, then each test taken back to
// it), as llama-bench's -d: the labels say the depth, the profiled steps' attention reads the depth's
// keys besides their own, and the context must hold the depth too. --batch refuses it.
TEST(BenchTest, DepthIsInTheCacheBeforeEachTest) {
  test::CommandResult r = test::RunDoppler("bench --synthetic tiny -p 8 -n 8 -r 1 -d 40");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* field : {"pp8 @ d40:", "tg8 @ d40:", "ttft (p=8, d=40):"}) {
    EXPECT_NE(r.out.find(field), std::string::npos) << field << "\n" << r.out;
  }
  // The attention's bytes (its KV rows read) in the decode and prefill profiles, at depths 0 and 40.
  auto attention_bytes = [](int depth) {
    const test::CommandResult run =
        test::RunDoppler(absl::StrCat("bench --synthetic tiny -p 8 -n 8 -r 1 --json --profile -d ", depth));
    EXPECT_EQ(run.exit_code, 0) << run.err;
    const nlohmann::json j = nlohmann::json::parse(run.out);
    EXPECT_EQ(j["n_depth"].get<int>(), depth);
    std::pair<uint64_t, uint64_t> bytes{0, 0};
    for (const nlohmann::json& n : j["profile"]["nodes"]) {
      if (n["op"] == "attention") bytes.first += n["bytes"].get<uint64_t>();
    }
    for (const nlohmann::json& n : j["prefill_profile"]["nodes"]) {
      if (n["op"] == "attention") bytes.second += n["bytes"].get<uint64_t>();
    }
    return bytes;
  };
  const std::pair<uint64_t, uint64_t> shallow = attention_bytes(0), deep = attention_bytes(40);
  EXPECT_GT(shallow.first, 0u);
  EXPECT_GT(deep.first, shallow.first);
  EXPECT_GT(deep.second, shallow.second);

  r = test::RunDoppler("bench --synthetic tiny -p 8 -n 8 -r 1 -d 40 -c 50");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--ctx-size 50 is smaller than the 56 positions -d 40, -p 8 and -n 8 need"), std::string::npos)
      << r.err;
  r = test::RunDoppler("bench --synthetic tiny -p 8 -n 8 -r 1 -d 4 --batch 2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("-d is for the single-sequence test"), std::string::npos) << r.err;
  r = test::RunDoppler("bench --synthetic tiny -p 8 -n 8 -r 1 -d -1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("-d must be at least 0"), std::string::npos) << r.err;
}

TEST(ProfileTest, NodesSumToTheTotalAndNameTheirKernels) {
  const test::CommandResult r = test::RunDoppler("bench --synthetic tiny -p 8 -n 4 -r 1 --json --profile");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("profile"));
  const nlohmann::json& p = j["profile"];
  ASSERT_EQ(p["nodes"].size(), j["dispatches_per_token"].get<size_t>());
  double sum = 0;
  int level = 0;  // levels count up from 0 in dispatch order, one per barrier
  for (const nlohmann::json& n : p["nodes"]) {
    const int l = n["level"].get<int>();
    EXPECT_TRUE(l == level || l == level + 1) << n.dump();
    level = l;
    const std::string kernel = n["kernel"];
    EXPECT_NE(kernel.find('.'), std::string::npos) << n.dump();  // family.variant
    EXPECT_GT(kernel.find('.'), 0u);
    EXPECT_GE(n["time_us"].get<double>(), 0);
    EXPECT_GT(n["bytes"].get<uint64_t>(), 0u);
    sum += n["time_us"].get<double>();
  }
  EXPECT_NEAR(sum, p["total_us"].get<double>(), 1e-6 * sum + 1e-9);
  EXPECT_EQ(p["levels"].get<int>(), level + 1);
  EXPECT_EQ(p["levels"].get<int>(), j["barriers_per_token"].get<int>() + 1);
  int count = 0;
  for (const nlohmann::json& k : p["kinds"]) count += k["count"].get<int>();
  EXPECT_EQ(count, static_cast<int>(p["nodes"].size()));
  EXPECT_GT(p["measured_step_us"].get<double>(), 0);
  // Each level's time less a timestamp's cost, (timestamped - bare) / levels: the nodes sum to the
  // steps timed at their ends (more only where a level was shorter than the cost), and to no more
  // than the timestamped levels.
  const double timestamped = p["timestamped_total_us"].get<double>(), bare = p["bare_step_us"].get<double>();
  const double cost = p["timestamp_cost_us"].get<double>();
  EXPECT_GT(bare, 0);
  EXPECT_NEAR(cost, std::max(0.0, timestamped - bare) / p["levels"].get<int>(), 1e-9 * timestamped);
  EXPECT_LE(sum, timestamped * (1 + 1e-9));
  EXPECT_GE(sum, std::min(bare, timestamped) * (1 - 1e-9));
}

TEST(BenchTest, TextProfileAndClearErrors) {
  test::CommandResult r = test::RunDoppler("bench --synthetic tiny -p 4 -n 2 -r 1 --profile");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("profile total"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("measured step"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("matmul.gemv"), std::string::npos) << r.out;

  r = test::RunDoppler("bench --synthetic llama-9 -p 4 -n 2 -r 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unknown synthetic model 'llama-9' (known: llama-3.2-1b"), std::string::npos) << r.err;
  r = test::RunDoppler("bench -p 4 -n 2");
  EXPECT_EQ(r.exit_code, 2);  // a required option missing: a usage error
  EXPECT_NE(r.err.find("--synthetic NAME"), std::string::npos) << r.err;
  r = test::RunDoppler("bench --synthetic tiny -r 0");
  EXPECT_EQ(r.exit_code, 1);
}

}  // namespace
// bench/compare.sh against a stand-in llama-bench that prints fixed llama-bench JSON: the table
// holds both figures and their ratio.
TEST(CompareScript, PrintsBothBenchmarksAndTheirRatio) {
  const std::filesystem::path repo = std::filesystem::path(__FILE__).parent_path().parent_path();
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "doppler_compare_test";
  std::filesystem::create_directories(dir);
  {
    std::ofstream fake(dir / "llama-bench");
    fake << "#!/bin/sh\necho '[{\"n_prompt\": 16, \"n_gen\": 0, \"avg_ts\": 100.0, \"stddev_ts\": 1.0}, "
            "{\"n_prompt\": 0, \"n_gen\": 8, \"avg_ts\": 1.0e-3, \"stddev_ts\": 0.0}]'\n";
  }
  std::filesystem::permissions(dir / "llama-bench", std::filesystem::perms::owner_all);
  const std::string model = (test::FixturesDir() / "gguf" / "llama_q-Q8_0.gguf").string();
  const test::CommandResult r = test::RunShell("DOPPLER_BINARY=" + test::DopplerBinary() + " bash " +
                                               (repo / "bench" / "compare.sh").string() + " " + model + " " +
                                               dir.string() + " -p 16 -n 8 -r 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("| pp16 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 100.0 ± 1.0 |"), std::string::npos) << r.out;
  // Any real tg8 is far above the stand-in's 0.001 tok/s: a ratio with thousands in it.
  const size_t tg = r.out.find("| tg8 |");
  ASSERT_NE(tg, std::string::npos) << r.out;
  const std::string row = r.out.substr(tg, r.out.find('\n', tg) - tg);
  EXPECT_NE(row.find("| 0.0 ± 0.0 |"), std::string::npos) << row;
  EXPECT_NE(row.find("x |"), std::string::npos) << row;
  EXPECT_NE(r.out.find("of the bandwidth floor"), std::string::npos) << r.out;

  const test::CommandResult missing = test::RunShell("bash " + (repo / "bench" / "compare.sh").string() + " /no/such.gguf");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("no such model file"), std::string::npos) << missing.err;
}

}  // namespace doppler
