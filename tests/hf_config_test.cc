// Tests of the HF config.json reader and RoPE inv_freq against transformers' own buffers.
#include "formats/hf_config.h"
#include "models/rope.h"

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/fixtures.h"

namespace doppler::formats {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

json ReadJson(const fs::path& p) { return test::ReadJsonFile(p); }

void WriteJson(const fs::path& p, const json& j) { std::ofstream(p) << j.dump(2); }

std::vector<std::string> HfFixtureNames() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(test::FixturesDir() / "hf")) {
    if (fs::exists(e.path() / "config.json")) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Every field except `raw`.
void ExpectSameRope(const RopeConfig& a, const RopeConfig& b, const std::string& what) {
  EXPECT_EQ(a.theta, b.theta) << what;
  EXPECT_EQ(a.scaling.type, b.scaling.type) << what;
  EXPECT_EQ(a.scaling.factor, b.scaling.factor) << what;
  EXPECT_EQ(a.scaling.low_freq_factor, b.scaling.low_freq_factor) << what;
  EXPECT_EQ(a.scaling.high_freq_factor, b.scaling.high_freq_factor) << what;
  EXPECT_EQ(a.scaling.original_max_position_embeddings, b.scaling.original_max_position_embeddings) << what;
  EXPECT_EQ(a.scaling.attention_factor, b.scaling.attention_factor) << what;
  EXPECT_EQ(a.scaling.beta_fast, b.scaling.beta_fast) << what;
  EXPECT_EQ(a.scaling.beta_slow, b.scaling.beta_slow) << what;
  EXPECT_EQ(a.scaling.truncate, b.scaling.truncate) << what;
  EXPECT_EQ(a.scaling.long_factor, b.scaling.long_factor) << what;
  EXPECT_EQ(a.scaling.short_factor, b.scaling.short_factor) << what;
}

void ExpectSameConfig(const ModelConfig& a, const ModelConfig& b, const std::string& what) {
  EXPECT_EQ(a.architecture, b.architecture) << what;
  EXPECT_EQ(a.model_type, b.model_type) << what;
  EXPECT_EQ(a.vocab_size, b.vocab_size) << what;
  EXPECT_EQ(a.hidden_size, b.hidden_size) << what;
  EXPECT_EQ(a.intermediate_size, b.intermediate_size) << what;
  EXPECT_EQ(a.num_layers, b.num_layers) << what;
  EXPECT_EQ(a.num_heads, b.num_heads) << what;
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads) << what;
  EXPECT_EQ(a.head_dim, b.head_dim) << what;
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps) << what;
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings) << what;
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings) << what;
  EXPECT_EQ(a.hidden_act, b.hidden_act) << what;
  EXPECT_EQ(a.attention_bias, b.attention_bias) << what;
  ExpectSameRope(a.rope, b.rope, what + " rope");
  ASSERT_EQ(a.rope_local.has_value(), b.rope_local.has_value()) << what;
  if (a.rope_local) ExpectSameRope(*a.rope_local, *b.rope_local, what + " rope_local");
  EXPECT_EQ(a.sliding_window, b.sliding_window) << what;
  EXPECT_EQ(a.layer_types, b.layer_types) << what;
  EXPECT_EQ(a.bos_token_id, b.bos_token_id) << what;
  EXPECT_EQ(a.eos_token_ids, b.eos_token_ids) << what;
}

TEST(HfConfig, EveryFixtureParsesAndMatchesItsConstructorArguments) {
  std::vector<std::string> names = HfFixtureNames();
  ASSERT_GE(names.size(), 8u);
  for (const std::string& name : names) {
    const fs::path dir = test::FixturesDir() / "hf" / name;
    absl::StatusOr<ModelConfig> c = ReadHfConfig(dir / "config.json");
    ASSERT_TRUE(c.ok()) << c.status();
    const json kw = ReadJson(dir / "reference.json")["config_kwargs"];
    EXPECT_EQ(c->vocab_size, kw["vocab_size"].get<int>()) << name;
    EXPECT_EQ(c->hidden_size, kw["hidden_size"].get<int>()) << name;
    EXPECT_EQ(c->intermediate_size, kw["intermediate_size"].get<int>()) << name;
    EXPECT_EQ(c->num_layers, kw["num_hidden_layers"].get<int>()) << name;
    EXPECT_EQ(c->num_heads, kw["num_attention_heads"].get<int>()) << name;
    EXPECT_EQ(c->num_kv_heads, kw["num_key_value_heads"].get<int>()) << name;
    const int head_dim = kw.contains("head_dim") ? kw["head_dim"].get<int>()
                                                 : kw["hidden_size"].get<int>() / kw["num_attention_heads"].get<int>();
    EXPECT_EQ(c->head_dim, head_dim) << name;
    EXPECT_EQ(c->tie_word_embeddings, kw["tie_word_embeddings"].get<bool>()) << name;
    EXPECT_EQ(c->rms_norm_eps, kw["rms_norm_eps"].get<float>()) << name;
    EXPECT_EQ(c->max_position_embeddings, 512) << name;
    EXPECT_EQ(c->bos_token_id, kw["bos_token_id"].get<int>()) << name;
    EXPECT_EQ(c->eos_token_ids, std::vector<int>{kw["eos_token_id"].get<int>()}) << name;
    EXPECT_FALSE(c->architecture.empty()) << name;
    EXPECT_EQ(c->raw["model_type"], c->model_type) << name;
  }
}

TEST(HfConfig, Stories260KParses) {
  absl::StatusOr<ModelConfig> c = ReadHfConfig(test::FixturesDir() / "stories260K/hf/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "LlamaForCausalLM");
  EXPECT_EQ(c->model_type, "llama");
  EXPECT_EQ(c->vocab_size, 512);
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->intermediate_size, 172);
  EXPECT_EQ(c->num_layers, 5);
  EXPECT_EQ(c->num_heads, 8);
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 8);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->rope.theta, 10000.0f);
  EXPECT_EQ(c->rope.scaling.type, "default");
  EXPECT_FALSE(c->rope_local.has_value());
  EXPECT_FALSE(c->sliding_window.has_value());
}

// The classic spelling (rope_theta / rope_scaling / rope_local_base_freq, as in
// reference.json's config_kwargs) must parse to the same ModelConfig as transformers 5's.
TEST(HfConfig, ClassicAndRopeParametersSpellingsAgree) {
  for (const std::string& name : HfFixtureNames()) {
    const fs::path dir = test::FixturesDir() / "hf" / name;
    json classic = ReadJson(dir / "config.json");
    classic.erase("rope_parameters");
    const json kwargs = ReadJson(dir / "reference.json")["config_kwargs"];
    for (const auto& [key, value] : kwargs.items()) classic[key] = value;
    if (classic.contains("rope_parameters")) {  // kwargs in the new spelling (gpt_oss): respell them
      const json rope = classic["rope_parameters"];
      classic.erase("rope_parameters");
      classic["rope_theta"] = rope["rope_theta"];
      classic["rope_scaling"] = rope;
      classic["rope_scaling"].erase("rope_theta");
    }
    ASSERT_TRUE(classic.contains("rope_theta")) << name;
    const fs::path tmp = test::MakeTempDir("classic_" + name);
    WriteJson(tmp / "config.json", classic);

    absl::StatusOr<ModelConfig> v5 = ReadHfConfig(dir / "config.json");
    absl::StatusOr<ModelConfig> old = ReadHfConfig(tmp / "config.json");
    ASSERT_TRUE(v5.ok()) << v5.status();
    ASSERT_TRUE(old.ok()) << old.status();
    ExpectSameConfig(*v5, *old, name);
    fs::remove_all(tmp);
  }
}

TEST(HfConfig, Gemma3HasLocalAndGlobalRope) {
  absl::StatusOr<ModelConfig> c = ReadHfConfig(test::FixturesDir() / "hf/gemma3/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope.theta, 1e6f);
  EXPECT_EQ(c->rope.scaling.type, "linear");
  EXPECT_EQ(c->rope.scaling.factor, 8.0f);
  ASSERT_TRUE(c->rope_local.has_value());
  EXPECT_EQ(c->rope_local->theta, 10000.0f);
  EXPECT_EQ(c->rope_local->scaling.type, "default");
  EXPECT_EQ(c->sliding_window, 8);
  EXPECT_EQ(c->hidden_act, "gelu_pytorch_tanh");
  EXPECT_EQ(c->layer_types, (std::vector<std::string>{"sliding_attention", "sliding_attention", "full_attention",
                                                       "sliding_attention"}));
  EXPECT_EQ(c->raw["query_pre_attn_scalar"], 48);
}

TEST(HfConfig, LlamaHasLlama3Scaling) {
  absl::StatusOr<ModelConfig> c = ReadHfConfig(test::FixturesDir() / "hf/llama/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope.theta, 500000.0f);
  EXPECT_EQ(c->rope.scaling.type, "llama3");
  EXPECT_EQ(c->rope.scaling.factor, 8.0f);
  EXPECT_EQ(c->rope.scaling.low_freq_factor, 1.0f);
  EXPECT_EQ(c->rope.scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c->rope.scaling.original_max_position_embeddings, 64);
}

TEST(HfConfig, SlidingWindowOnlyWhenEnabled) {
  absl::StatusOr<ModelConfig> mistral = ReadHfConfig(test::FixturesDir() / "hf/mistral/config.json");
  ASSERT_TRUE(mistral.ok()) << mistral.status();
  EXPECT_EQ(mistral->sliding_window, 12);
  // Qwen2 checkpoints carry a window size that use_sliding_window=false switches off.
  json j = ReadJson(test::FixturesDir() / "hf/qwen2/config.json");
  j["sliding_window"] = 4096;
  absl::StatusOr<ModelConfig> qwen = ParseHfConfig(j, "qwen2/config.json");
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  EXPECT_FALSE(qwen->sliding_window.has_value());
}

// Max relative difference between our inv_freq and transformers' buffer; counts ulps too.
double MaxRelDiff(const std::vector<float>& ours, const json& ref, int* max_ulps) {
  double worst = 0;
  *max_ulps = 0;
  EXPECT_EQ(ours.size(), ref.size());
  for (size_t i = 0; i < std::min(ours.size(), ref.size()); ++i) {
    const float r = ref[i].get<float>();  // the JSON double is the float32 value printed exactly
    worst = std::max(worst, std::abs(static_cast<double>(ours[i]) - r) / std::abs(r));
    int32_t a, b;
    std::memcpy(&a, &ours[i], 4);
    std::memcpy(&b, &r, 4);
    *max_ulps = std::max(*max_ulps, std::abs(a - b));
  }
  return worst;
}

TEST(HfConfig, RopeMatchesTransformersBuffers) {
  double overall = 0;
  int overall_ulps = 0;
  for (const std::string& name : HfFixtureNames()) {
    const fs::path dir = test::FixturesDir() / "hf" / name;
    absl::StatusOr<ModelConfig> c = ReadHfConfig(dir / "config.json");
    ASSERT_TRUE(c.ok()) << c.status();
    const json buffers = ReadJson(dir / "reference.json")["rope_buffers"];
    std::vector<std::pair<std::string, const RopeConfig*>> checks;
    if (buffers.contains("model.rotary_emb.inv_freq")) {
      checks.push_back({"model.rotary_emb.inv_freq", &c->rope});
    } else {
      ASSERT_TRUE(c->rope_local.has_value()) << name;
      checks.push_back({"model.rotary_emb.full_attention_inv_freq", &c->rope});
      checks.push_back({"model.rotary_emb.sliding_attention_inv_freq", &*c->rope_local});
    }
    // transformers' attention_scaling (yarn, longrope; 1 for the rest) multiplies cos and sin.
    const json scaling = ReadJson(dir / "reference.json").value("rope_attention_scaling", json::object());
    if (scaling.contains("model.rotary_emb")) {
      EXPECT_NEAR(models::ComputeRope(c->rope, c->head_dim, c->max_position_embeddings).attention_factor,
                  scaling["model.rotary_emb"].get<double>(), 1e-6)
          << name;
    }
    for (const auto& [key, rope] : checks) {
      ASSERT_TRUE(buffers.contains(key)) << name << " " << key;
      int ulps = 0;
      // The reference ran on sequences longer than any original context (LongRoPE's long factors).
      const models::RopeFrequencies f = models::ComputeRope(*rope, c->head_dim, c->max_position_embeddings);
      const double rel = MaxRelDiff(f.inv_freq, buffers[key], &ulps);
      EXPECT_LE(rel, 1e-6) << name << " " << key;
      overall = std::max(overall, rel);
      overall_ulps = std::max(overall_ulps, ulps);
    }
  }
  std::printf("ComputeRope vs transformers: max relative difference %.3g, max %d ulp\n", overall, overall_ulps);
}

TEST(HfConfig, RopeBasics) {
  RopeConfig rope;
  rope.theta = 10000.0f;
  std::vector<float> f = models::ComputeRope(rope, 8, 0).inv_freq;
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_NEAR(f[2], 0.01f, 1e-9);  // 10000^(-4/8)
  rope.scaling.type = "linear";
  rope.scaling.factor = 4.0f;
  EXPECT_EQ(models::ComputeRope(rope, 8, 0).inv_freq[0], 0.25f);
  EXPECT_TRUE(models::ComputeRope(rope, 0, 0).inv_freq.empty());
}

class HfConfigErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = ReadJson(test::FixturesDir() / "hf/llama/config.json");
    dir_ = test::MakeTempDir("hf_config_errors");
  }
  void TearDown() override { fs::remove_all(dir_); }
  absl::Status Parse(const json& j) {
    WriteJson(dir_ / "config.json", j);
    return ReadHfConfig(dir_ / "config.json").status();
  }
  json base_;
  fs::path dir_;
};

TEST_F(HfConfigErrors, MissingRequiredKeys) {
  for (const char* key : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"}) {
    json j = base_;
    j.erase(key);
    absl::Status st = Parse(j);
    EXPECT_FALSE(st.ok());
    EXPECT_THAT(std::string(st.message()), HasSubstr(key));
    EXPECT_THAT(std::string(st.message()), HasSubstr("config.json"));
  }
}

TEST_F(HfConfigErrors, BadValues) {
  json j = base_;
  j["hidden_size"] = -128;
  EXPECT_THAT(std::string(Parse(j).message()), HasSubstr("'hidden_size' must be positive"));
  j = base_;
  j["num_key_value_heads"] = 3;
  EXPECT_THAT(std::string(Parse(j).message()), HasSubstr("num_key_value_heads"));
  j = base_;
  j["vocab_size"] = "512";
  EXPECT_THAT(std::string(Parse(j).message()), HasSubstr("'vocab_size' must be an integer"));
  j = base_;
  j["rope_parameters"]["rope_type"] = "longrope";
  EXPECT_THAT(std::string(Parse(j).message()), HasSubstr("required key 'rope_parameters.long_factor' is missing"));
  j["rope_parameters"]["long_factor"] = {1.0, 2.0};
  EXPECT_THAT(std::string(Parse(j).message()), HasSubstr("'rope_parameters.long_factor' must be a list of"));
  j = base_;
  j["rope_parameters"]["rope_type"] = "yarn";
  j["rope_parameters"]["beta_fast"] = -1;
  EXPECT_THAT(std::string(Parse(j).message()), HasSubstr("beta_fast"));
  j = base_;
  j["rope_parameters"]["rope_type"] = "yarn";
  j["rope_parameters"]["attention_factor"] = 0;
  EXPECT_THAT(std::string(Parse(j).message()), HasSubstr("'rope_parameters.attention_factor' must be positive"));
  j = base_;
  j["rope_parameters"]["original_max_position_embeddings"] = 0;
  EXPECT_THAT(std::string(Parse(j).message()), HasSubstr("original_max_position_embeddings"));
  j = base_;
  j["rope_parameters"]["rope_theta"] = 1e300;
  EXPECT_THAT(std::string(Parse(j).message()), HasSubstr("rope_parameters.rope_theta' is out of float range"));
  j = base_;
  j["eos_token_id"] = {2, "x"};
  EXPECT_THAT(std::string(Parse(j).message()), HasSubstr("eos_token_id"));
  j = base_;
  j["layer_types"] = {"full_attention"};
  EXPECT_THAT(std::string(Parse(j).message()), HasSubstr("layer_types"));
  j = base_;
  j.erase("rope_parameters");
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  EXPECT_THAT(std::string(Parse(j).message()), HasSubstr("unsupported rope type dynamic"));
}

TEST_F(HfConfigErrors, NotJsonOrMissingFile) {
  std::ofstream(dir_ / "config.json") << "{\"vocab_size\": 12,";
  absl::Status st = ReadHfConfig(dir_ / "config.json").status();
  EXPECT_THAT(std::string(st.message()), HasSubstr("not valid JSON"));
  st = ReadHfConfig(dir_ / "nope.json").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(st.message()), HasSubstr("nope.json"));
  EXPECT_FALSE(ParseHfConfig(json::array(), "x").ok());
}

TEST_F(HfConfigErrors, DefaultsAndAlternativeForms) {
  json j = base_;
  j["head_dim"] = nullptr;  // null means "derive it"
  j.erase("num_key_value_heads");
  j["eos_token_id"] = {2, 7};
  j["bos_token_id"] = nullptr;
  j.erase("rope_parameters");  // no rope keys at all: theta 10000, no scaling
  absl::StatusOr<ModelConfig> c = ParseHfConfig(j, "cfg");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 128 / 4);
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int>{2, 7}));
  EXPECT_FALSE(c->bos_token_id.has_value());
  EXPECT_EQ(c->rope.theta, 10000.0f);
  EXPECT_EQ(c->rope.scaling.type, "default");
}

}  // namespace
}  // namespace doppler::formats
