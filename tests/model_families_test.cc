// The graphs the model families declare: structure (ring-buffer caches of sliding layers, q/k
// norms, fused-weight slices) and the errors for configs they cannot honour.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "checkpoints/weights.h"
#include "formats/safetensors.h"
#include "graph/builder.h"
#include "graph/graph.h"
#include "graph/half.h"
#include "graph/verifier.h"
#include "models/architecture.h"
#include "quant/float_codec.h"
#include "tests/support/fixtures.h"

namespace doppler {
namespace {

using graph::OpKind;
using ::testing::HasSubstr;

formats::ModelConfig Config(const std::string& name) {
  absl::StatusOr<formats::ModelConfig> c = formats::ReadHfConfig(test::FixturesDir() / "hf" / name / "config.json");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : formats::ModelConfig{};
}

models::BuildOptions Options(int64_t context, int64_t max_step_tokens) {
  models::BuildOptions o;
  o.context = context;
  o.max_step_tokens = max_step_tokens;
  return o;
}

const graph::Node* Find(const graph::Graph& g, OpKind kind, const std::string& label_or_name) {
  for (const graph::Node& n : g.nodes()) {
    if (n.kind == kind && (n.label == label_or_name || n.attrs.Str("name") == label_or_name)) return &n;
  }
  return nullptr;
}

TEST(ModelFamilies, EveryFamilyIsRegistered) {
  std::vector<std::string> names;
  for (const models::Architecture& a : models::Architectures()) names.push_back(a.hf_name);
  EXPECT_THAT(names, ::testing::IsSupersetOf({"LlamaForCausalLM", "Gemma3ForCausalLM", "Qwen2ForCausalLM",
                                              "Qwen3ForCausalLM", "MistralForCausalLM", "Phi3ForCausalLM",
                                              "Qwen3MoeForCausalLM", "MixtralForCausalLM", "GptOssForCausalLM"}));
}

// GPT-OSS: the sliding layer's ring cache, a sink input on every attention, and an expert's gate
// read from the stacked [E, in, 2I] tensor: a checkpoint whose tensor the config does not describe
// is an error naming both shapes and the slice; an unknown quantization is an error naming it.
TEST(ModelFamilies, GptOssReadsStackedExpertsAndSinks) {
  formats::ModelConfig c = Config("gpt_oss");
  absl::StatusOr<graph::Graph> g = models::BuildModelGraph(c, Options(64, 7));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Find(*g, OpKind::kState, "kv.0.k")->type.shape[0].value, 8 + 7 - 1);
  EXPECT_EQ(Find(*g, OpKind::kState, "kv.1.k")->type.shape[0].value, 64);
  for (const graph::Node& n : g->nodes()) {
    if (n.kind == OpKind::kAttention) EXPECT_EQ(n.attrs.Int("sinks"), 1) << n.label;
  }
  auto store = formats::OpenSafetensors(test::FixturesDir() / "hf" / "gpt_oss");
  ASSERT_TRUE(store.ok()) << store.status();
  const std::string gate = "model.layers.0.mlp.experts.gate_up_proj[3][0::2]";
  ASSERT_NE(Find(*g, OpKind::kParam, gate), nullptr);
  EXPECT_TRUE(checkpoints::MaterializeParam(**store, *Find(*g, OpKind::kParam, gate)).ok());

  c.intermediate_size = 48;  // the config now implies [4, 128, 96]
  g = models::BuildModelGraph(c, Options(64, 7));
  ASSERT_TRUE(g.ok()) << g.status();
  absl::Status s = checkpoints::MaterializeParam(**store, *Find(*g, OpKind::kParam, gate)).status();
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("tensor 'model.layers.0.mlp.experts.gate_up_proj' has shape [4, 128, 128] but the config "
                        "implies [4, 128, 96] (" + gate + " lies in it: rows from 0 every 2 of expert 3)"));

  c = Config("gpt_oss");
  c.raw["quantization_config"] = {{"quant_method", "fp8"}};
  EXPECT_THAT(std::string(models::BuildModelGraph(c, Options(64, 7)).status().message()),
              HasSubstr("quant_method 'fp8' is not supported"));
}

// Gemma3's sliding layers keep window + max_step_tokens - 1 rows and use the local rope; its
// global layer keeps the whole context and the scaled global rope.
TEST(ModelFamilies, Gemma3SlidingLayersHaveRingCachesAndTheLocalRope) {
  absl::StatusOr<graph::Graph> g = models::BuildModelGraph(Config("gemma3"), Options(64, 7));
  ASSERT_TRUE(g.ok()) << g.status();
  for (int l : {0, 1, 3}) {
    const graph::Node* k = Find(*g, OpKind::kState, "kv." + std::to_string(l) + ".k");
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->type.shape[0].value, 8 + 7 - 1) << "layer " << l;
    const graph::Node* a = Find(*g, OpKind::kAttention, "layers." + std::to_string(l) + ".attn.attention");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->attrs.Int("window"), 8);
    EXPECT_DOUBLE_EQ(a->attrs.Float("scale"), 1.0 / std::sqrt(48.0));
    const graph::Node* rope = Find(*g, OpKind::kRope, "layers." + std::to_string(l) + ".attn.q_rope");
    ASSERT_NE(rope, nullptr);
    EXPECT_EQ(g->node(rope->inputs[1]).attrs.Str("name"), "rope_local");
  }
  EXPECT_EQ(Find(*g, OpKind::kState, "kv.2.k")->type.shape[0].value, 64);
  EXPECT_EQ(Find(*g, OpKind::kAttention, "layers.2.attn.attention")->attrs.Int("window"), 0);
  EXPECT_EQ(g->node(Find(*g, OpKind::kRope, "layers.2.attn.q_rope")->inputs[1]).attrs.Str("name"), "rope");
  const graph::Node* q_norm = Find(*g, OpKind::kRmsNorm, "layers.0.attn.q_norm");
  ASSERT_NE(q_norm, nullptr);
  EXPECT_EQ(q_norm->attrs.Int("group"), 64);
  EXPECT_EQ(q_norm->attrs.Float("weight_offset"), 1.0);
  const graph::Node* scale = Find(*g, OpKind::kScale, "embed_scale");
  ASSERT_NE(scale, nullptr);
  EXPECT_EQ(static_cast<float>(scale->attrs.Float("factor")), static_cast<float>(std::sqrt(128.0)));
  // Without a step size the sliding layers keep the whole context; a context smaller than the
  // ring keeps the context.
  g = models::BuildModelGraph(Config("gemma3"), Options(64, 0));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Find(*g, OpKind::kState, "kv.0.k")->type.shape[0].value, 64);
  g = models::BuildModelGraph(Config("gemma3"), Options(10, 7));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Find(*g, OpKind::kState, "kv.0.k")->type.shape[0].value, 10);
}

TEST(ModelFamilies, MistralSlidesOnEveryLayerQwenOnNone) {
  absl::StatusOr<graph::Graph> g = models::BuildModelGraph(Config("mistral"), Options(64, 7));
  ASSERT_TRUE(g.ok()) << g.status();
  for (int l : {0, 1}) {
    EXPECT_EQ(Find(*g, OpKind::kState, "kv." + std::to_string(l) + ".v")->type.shape[0].value, 12 + 7 - 1);
  }
  g = models::BuildModelGraph(Config("qwen2"), Options(64, 7));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Find(*g, OpKind::kState, "kv.1.k")->type.shape[0].value, 64);
  EXPECT_NE(Find(*g, OpKind::kParam, "model.layers.1.self_attn.v_proj.bias"), nullptr);
}

TEST(ModelFamilies, Phi3SlicesTheFusedTensors) {
  absl::StatusOr<graph::Graph> g = models::BuildModelGraph(Config("phi3"), Options(64, 7));
  ASSERT_TRUE(g.ok()) << g.status();
  const graph::Node* v = Find(*g, OpKind::kParam, "model.layers.0.self_attn.qkv_proj.weight[192:256]");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->attrs.Str("source"), "model.layers.0.self_attn.qkv_proj.weight");
  EXPECT_EQ(v->attrs.Int("row_offset"), 192);
  EXPECT_EQ(v->attrs.Int("source_rows"), 256);
  EXPECT_EQ(v->type.shape[0].value, 64);

  // The slice is exactly those rows of the stored tensor.
  auto store = formats::OpenSafetensors(test::FixturesDir() / "hf" / "phi3");
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::vector<uint8_t>> bytes = checkpoints::MaterializeParam(**store, *v);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<formats::TensorView> t = (*store)->Get("model.layers.0.self_attn.qkv_proj.weight");
  ASSERT_TRUE(t.ok());
  std::vector<float> all = *quant::ToFloat32(*t);
  std::vector<float> rows = quant::DecodeFloats(v->type.dtype, *bytes);
  ASSERT_EQ(rows.size(), 64u * 128u);
  for (size_t i = 0; i < rows.size(); i += 97) {
    EXPECT_EQ(rows[i], static_cast<float>(graph::HalfToFloat(graph::FloatToHalf(all[192 * 128 + i])))) << i;
  }
}

TEST(ModelFamilies, Phi3ConfigThatContradictsTheFusedTensorNamesIt) {
  formats::ModelConfig c = Config("phi3");
  c.num_kv_heads = 1;  // the config now implies a [192, 128] qkv_proj
  absl::StatusOr<graph::Graph> g = models::BuildModelGraph(c, Options(64, 7));
  ASSERT_TRUE(g.ok()) << g.status();
  auto store = formats::OpenSafetensors(test::FixturesDir() / "hf" / "phi3");
  ASSERT_TRUE(store.ok()) << store.status();
  const graph::Node* k = Find(*g, OpKind::kParam, "model.layers.0.self_attn.qkv_proj.weight[128:160]");
  ASSERT_NE(k, nullptr);
  absl::Status s = checkpoints::MaterializeParam(**store, *k).status();
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("tensor 'model.layers.0.self_attn.qkv_proj.weight' has shape [256, 128] but the config "
                        "implies [192, 128]"));
}

TEST(ModelFamilies, ParamSlicesAreChecked) {
  graph::GraphBuilder b;
  b.ParamFrom("w[8:16]", {graph::DType::kF32, {graph::Dim::Static(8), graph::Dim::Static(4)}}, {"w", 12, 8});
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("do not lie inside the source's 12"));
  graph::GraphBuilder strided;
  strided.ParamFrom("w[1::2]", {graph::DType::kF32, {graph::Dim::Static(6), graph::Dim::Static(4)}},
                    {.source = "w", .source_rows = 12, .row_offset = 1, .row_stride = 2, .source_experts = 3, .expert = 3});
  EXPECT_THAT(std::string(strided.status().message()), HasSubstr("expert 3 of 3"));

  graph::GraphBuilder ok;
  ok.Input("x", {graph::DType::kF32, {graph::Dim::Tokens(), graph::Dim::Static(4)}});
  ok.ParamFrom("w[4:8]", {graph::DType::kF32, {graph::Dim::Static(4), graph::Dim::Static(4)}}, {"w", 12, 4});
  absl::StatusOr<graph::Graph> g = std::move(ok).Finish();
  ASSERT_TRUE(g.ok()) << g.status();
  g->mutable_node(1).attrs.Set("row_offset", int64_t{10});
  EXPECT_THAT(std::string(graph::Verify(*g).message()), HasSubstr("do not lie inside the source's 12"));
}

TEST(ModelFamilies, UnsupportedConfigsAreErrors) {
  formats::ModelConfig c = Config("gemma3");
  c.raw["final_logit_softcapping"] = 30.0;
  EXPECT_THAT(std::string(models::BuildModelGraph(c, Options(64, 7)).status().message()),
              HasSubstr("final_logit_softcapping"));
  c = Config("gemma3");
  c.layer_types[1] = "chunked_attention";
  EXPECT_THAT(std::string(models::BuildModelGraph(c, Options(64, 7)).status().message()),
              HasSubstr("layer_types[1] is 'chunked_attention'"));
  c = Config("gemma3");
  c.sliding_window.reset();
  EXPECT_THAT(std::string(models::BuildModelGraph(c, Options(64, 7)).status().message()),
              HasSubstr("no sliding_window"));
  // A layer pattern that is no integer a layer index can be taken modulo (1e28 found by the
  // config fuzzer), with and without layer_types.
  for (double pattern : {1.22e28, 2.5, 0.0}) {
    for (bool types : {true, false}) {
      c = Config("gemma3");
      c.raw["sliding_window_pattern"] = pattern;
      if (!types) c.layer_types.clear();
      EXPECT_THAT(std::string(models::BuildModelGraph(c, Options(64, 7)).status().message()),
                  HasSubstr("config key 'sliding_window_pattern' must be an integer from 1 to 1073741824"))
          << pattern;
    }
  }
  // The experts' counts and the sparse layers' period likewise.
  for (const auto& [key, value, message] :
       {std::tuple<const char*, double, const char*>{"num_local_experts", 1.22e28, "'num_local_experts' must be an integer from 1 to 1073741824"},
        {"num_experts_per_tok", 9, "'num_experts_per_tok' must be an integer from 1 to 8, got 9"},
        {"num_experts_per_tok", 1.5, "'num_experts_per_tok' must be an integer from 1 to 8"},
        {"decoder_sparse_step", -3e30, "'decoder_sparse_step' must be an integer from 1 to 1073741824"}}) {
    c = Config("qwen3_moe");
    c.raw[key] = value;
    EXPECT_THAT(std::string(models::BuildModelGraph(c, Options(64, 7)).status().message()), HasSubstr(message)) << key;
  }
  c = Config("qwen3");
  c.hidden_act = "relu2";
  EXPECT_THAT(std::string(models::BuildModelGraph(c, Options(64, 7)).status().message()),
              HasSubstr("unsupported MLP activation 'relu2'"));
}

}  // namespace
}  // namespace doppler
