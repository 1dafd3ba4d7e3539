// GPT-OSS as published: its experts' matrices in MXFP4, which transformers saves as pairs of U8
// tensors `*_blocks` [E, out, G, 16] and `*_scales` [E, out, G]. The fixture model with its experts
// replaced by random MXFP4 blocks must compute what the same model computes with the blocks' values
// stored as transformers' dequantized form, f32 [E, in, out] (whose reading the fixture tests check
// against transformers): on the interpreter the very same logits, on the GPU (the blocks kept in
// MXFP4 and decoded in the expert kernels) the same within f32 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include "checkpoints/hf_to_gguf.h"
#include "checkpoints/weights.h"
#include "formats/gguf/gguf_file.h"
#include "formats/safetensors.h"
#include "graph/interpreter.h"
#include "models/architecture.h"
#include "nlohmann/json.hpp"
#include "runtime/engine.h"
#include "tests/support/engine_env.h"
#include "tests/support/fixtures.h"
#include "tests/support/gpu_runner.h"
#include "tests/support/reference.h"
#include "tests/support/reference_logits.h"
#include "tests/support/scoped_tune.h"

namespace doppler {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct StoredTensor {
  std::string dtype;  // safetensors' spelling: F32, U8
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

void WriteSafetensors(const fs::path& file, const std::map<std::string, StoredTensor>& tensors) {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(file, std::ios::binary);
  const uint64_t n = text.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << text;
  for (const auto& [name, t] : tensors) out.write(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
}

// E2M1's values, as transformers' FP4_VALUES.
constexpr float kFp4[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                            -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// Random MXFP4 blocks and scales for a stacked [E, in, out] expert tensor, stored as transformers
// saves them ([E, out, in / 32, 16] codes, [E, out, in / 32] exponents), and their values as
// transformers dequantizes them: code c of byte j's low nibble is value 2j of its block, the high
// nibble's value 2j + 1, each kFp4[c] * 2^(s - 127), the whole transposed back to [E, in, out].
void Mxfp4Experts(const std::vector<int64_t>& shape, std::mt19937& rng, StoredTensor& blocks, StoredTensor& scales,
                  StoredTensor& values) {
  const int64_t experts = shape[0], in = shape[1], out = shape[2], groups = in / 32;
  blocks = {"U8", {experts, out, groups, 16}, std::vector<uint8_t>(static_cast<size_t>(experts * out * groups * 16))};
  scales = {"U8", {experts, out, groups}, std::vector<uint8_t>(static_cast<size_t>(experts * out * groups))};
  // Values of about 1 / sqrt(in), as the fixture's: codes of rms ~2.9 under 2^-5 or 2^-4.
  for (uint8_t& b : blocks.bytes) b = static_cast<uint8_t>(rng());
  for (uint8_t& s : scales.bytes) s = static_cast<uint8_t>(122 + rng() % 2);
  std::vector<float> v(static_cast<size_t>(experts * in * out));
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t k = 0; k < in; ++k) {
        const size_t block = static_cast<size_t>((e * out + o) * groups + k / 32);
        const uint8_t byte = blocks.bytes[block * 16 + static_cast<size_t>((k % 32) / 2)];
        const int code = (k % 2 == 0) ? (byte & 15) : (byte >> 4);
        v[static_cast<size_t>((e * in + k) * out + o)] = std::ldexp(kFp4[code], scales.bytes[block] - 127);
      }
    }
  }
  values = {"F32", shape, std::vector<uint8_t>(v.size() * 4)};
  std::memcpy(values.bytes.data(), v.data(), values.bytes.size());
}

// The logits of every prompt position, then of each decode step along `tokens`, on the interpreter.
absl::StatusOr<std::pair<std::vector<float>, std::vector<float>>> InterpreterLogits(
    const fs::path& dir, const std::vector<int32_t>& prompt, const std::vector<int32_t>& tokens) {
  absl::StatusOr<formats::ModelConfig> config = formats::ReadHfConfig(dir / "config.json");
  if (!config.ok()) return config.status();
  absl::StatusOr<std::unique_ptr<formats::WeightStore>> store = formats::OpenSafetensors(dir);
  if (!store.ok()) return store.status();
  models::BuildOptions o;
  o.context = 64;
  o.weight_dtype = o.kv_dtype = graph::DType::kF32;
  o.logits_all_tokens = true;
  o.max_step_tokens = static_cast<int64_t>(prompt.size());
  absl::StatusOr<graph::Graph> g = models::BuildModelGraph(*config, o);
  if (!g.ok()) return g.status();
  checkpoints::StoreParamSource params(**store);
  graph::Interpreter interp(params);
  const int64_t n = static_cast<int64_t>(prompt.size());
  auto out = interp.Run(*g, {{"ids", graph::Tensor::I32({n}, prompt)}}, 0);
  if (!out.ok()) return out.status();
  std::pair<std::vector<float>, std::vector<float>> logits{out->at("logits").f, {}};
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto step = interp.Run(*g, {{"ids", graph::Tensor::I32({1}, {tokens[i]})}}, n + static_cast<int64_t>(i));
    if (!step.ok()) return step.status();
    logits.second.insert(logits.second.end(), step->at("logits").f.begin(), step->at("logits").f.end());
  }
  return logits;
}

// The fixture model with random MXFP4 experts: in `a` their values in transformers' dequantized
// f32 form, in `b` as published (blocks and scales, quantization_config mxfp4).
void WriteCheckpoints(const test::HfReference& ref, const fs::path& a, const fs::path& b) {
  absl::StatusOr<std::unique_ptr<formats::WeightStore>> fixture = formats::OpenSafetensors(ref.dir);
  ASSERT_TRUE(fixture.ok()) << fixture.status();
  std::map<std::string, StoredTensor> dequantized, published;
  std::mt19937 rng(5);
  for (const std::string& name : (*fixture)->Names()) {
    absl::StatusOr<formats::TensorView> t = (*fixture)->Get(name);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ(t->dtype, graph::DType::kF32) << name;
    const bool expert_matrix = name.ends_with("mlp.experts.gate_up_proj") || name.ends_with("mlp.experts.down_proj");
    if (!expert_matrix) {
      StoredTensor same{"F32", t->shape, std::vector<uint8_t>(t->data, t->data + t->nbytes)};
      dequantized[name] = same;
      published[name] = same;
      continue;
    }
    Mxfp4Experts(t->shape, rng, published[name + "_blocks"], published[name + "_scales"], dequantized[name]);
  }
  std::ifstream config_in(ref.dir / "config.json");
  json config = json::parse(config_in);
  std::ofstream(a / "config.json") << config.dump();
  config["quantization_config"] = {{"quant_method", "mxfp4"}};
  std::ofstream(b / "config.json") << config.dump();
  WriteSafetensors(a / "model.safetensors", dequantized);
  WriteSafetensors(b / "model.safetensors", published);
}

TEST(GptOssMxfp4, PublishedExpertsComputeAsTheirDequantizedValues) {
  absl::StatusOr<test::HfReference> ref = test::LoadHfReference("gpt_oss");
  ASSERT_TRUE(ref.ok()) << ref.status();
  const fs::path a = test::MakeTempDir("gpt_oss_dequantized"), b = test::MakeTempDir("gpt_oss_mxfp4");
  WriteCheckpoints(*ref, a, b);

  const std::vector<int32_t> tokens(ref->greedy_tokens.begin(), ref->greedy_tokens.begin() + 4);
  auto want = InterpreterLogits(a, ref->input_ids, tokens);
  ASSERT_TRUE(want.ok()) << want.status();
  auto got = InterpreterLogits(b, ref->input_ids, tokens);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->first, want->first);
  EXPECT_EQ(got->second, want->second);

  // In float dots (experts.half=0) the experts compute as their dequantized values do; in the
  // rule's f16 pairs (devices with f16 arithmetic) within the bound of products of f16 operands.
  for (const char* tune : {"experts.half=0", ""}) {
    SCOPED_TRACE(tune);
    const test::ScopedTune scoped(tune);
    runtime::EngineOptions o = test::ReferenceEngineOptions(b);
    o.weight_dtype = graph::DType::kF32;
    absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(o);
    ASSERT_TRUE(engine.ok()) << engine.status();
    bool mxfp4_experts = false, half = false;
    for (const vk::PlannedDispatch& d : (*engine)->decode_plan().dispatches()) {
      mxfp4_experts |= d.variant.find("gemv.mxfp4.gated") != std::string::npos;
      half |= d.variant.find(".half") != std::string::npos;
    }
    EXPECT_TRUE(mxfp4_experts) << "the experts are not read as MXFP4";
    EXPECT_EQ(half, *tune == '\0' && (*engine)->device().info().fp16);
    const double tolerance = test::ToleranceFor((*engine)->decode_plan(), 1e-4);
    absl::StatusOr<test::ReferenceLogits> run =
        test::CompareWithReference(**engine, ref->input_ids, tokens, want->first.data(), want->second.data());
    ASSERT_TRUE(run.ok()) << run.status();
    std::printf("[ gpt_oss mxfp4%s ] worst row error against the dequantized model: prefill %.3g, decode %.3g\n",
                half ? ", f16 pairs" : "", run->prefill_error, run->decode_error);
    EXPECT_LE(run->prefill_error, tolerance);
    EXPECT_LE(run->decode_error, tolerance);
    EXPECT_EQ((*engine)->device().validation_messages(), 0);
  }
  fs::remove_all(a);
  fs::remove_all(b);
}

// `doppler convert` of the published form keeps the experts MXFP4 (ggml type 39), gate and up the
// even and odd rows of gate_up_proj's blocks as llama.cpp's converter splits them, down_proj's
// blocks as they are; the gpt-oss file runs as the dequantized model does.
TEST(GptOssMxfp4, ConvertedToGgufTheExpertsStayMxfp4) {
  absl::StatusOr<test::HfReference> ref = test::LoadHfReference("gpt_oss");
  ASSERT_TRUE(ref.ok()) << ref.status();
  const fs::path a = test::MakeTempDir("gpt_oss_dequantized"), b = test::MakeTempDir("gpt_oss_mxfp4");
  WriteCheckpoints(*ref, a, b);
  const fs::path gguf = test::MakeTempDir("gpt_oss_mxfp4_gguf") / "model.gguf";
  checkpoints::HfToGgufOptions c;
  c.model_dir = b;
  c.out = gguf;
  c.quant = quant::QuantScheme::kQ8_0;  // the float matrices; the experts keep their MXFP4
  ASSERT_TRUE(checkpoints::ConvertHfToGguf(c).ok());
  absl::StatusOr<std::unique_ptr<formats::GgufFile>> file = formats::GgufFile::Open(gguf);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::unique_ptr<formats::WeightStore>> published = formats::OpenSafetensors(b);
  ASSERT_TRUE(published.ok()) << published.status();
  const size_t row = 17 * 128 / 32;  // an MXFP4 row of hidden 128 values
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.", blk = "blk." + std::to_string(l) + ".";
    const formats::TensorView gate_up = *(*published)->Get(p + "gate_up_proj"), down = *(*published)->Get(p + "down_proj");
    for (const auto& [part, offset] : {std::pair{"ffn_gate_exps", 0}, std::pair{"ffn_up_exps", 1}}) {
      absl::StatusOr<formats::TensorView> t = (*file)->Get(blk + part + ".weight");
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ(t->dtype, graph::DType::kMXFP4);
      ASSERT_EQ(t->shape, (std::vector<int64_t>{4, 64, 128}));
      for (int64_t r = 0; r < 4 * 64; ++r) {
        ASSERT_EQ(std::memcmp(t->data + r * row, gate_up.data + (2 * r + offset) * row, row), 0) << part << " row " << r;
      }
    }
    absl::StatusOr<formats::TensorView> d = (*file)->Get(blk + "ffn_down_exps.weight");
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->dtype, graph::DType::kMXFP4);
    EXPECT_EQ(d->shape, (std::vector<int64_t>{4, 128, 64}));
    EXPECT_TRUE(d->nbytes == down.nbytes && std::memcmp(d->data, down.data, d->nbytes) == 0);
    EXPECT_EQ((*file)->Get(blk + "attn_q.weight")->dtype, graph::DType::kQ8_0);
  }

  // The file against the dequantized f32 model with q8_0 attention: as the directory quantized at
  // load (the same bytes), and near the f32 model.
  const std::vector<int32_t> tokens(ref->greedy_tokens.begin(), ref->greedy_tokens.begin() + 4);
  auto want = InterpreterLogits(a, ref->input_ids, tokens);
  ASSERT_TRUE(want.ok()) << want.status();
  runtime::EngineOptions o = test::ReferenceEngineOptions(gguf);
  o.weight_dtype = graph::DType::kF32;
  o.kv_dtype = graph::DType::kF32;
  absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  absl::StatusOr<test::ReferenceLogits> run =
      test::CompareWithReference(**engine, ref->input_ids, tokens, want->first.data(), want->second.data());
  ASSERT_TRUE(run.ok()) << run.status();
  runtime::EngineOptions h = test::ReferenceEngineOptions(b);
  h.weight_dtype = graph::DType::kF32;
  h.quant = quant::QuantScheme::kQ8_0;
  absl::StatusOr<std::unique_ptr<runtime::Engine>> hf = runtime::Engine::Create(h);
  ASSERT_TRUE(hf.ok()) << hf.status();
  absl::StatusOr<test::ReferenceLogits> hf_run =
      test::CompareWithReference(**hf, ref->input_ids, tokens, want->first.data(), want->second.data());
  ASSERT_TRUE(hf_run.ok()) << hf_run.status();
  const int64_t rows = static_cast<int64_t>(ref->input_ids.size()), vocab = (*engine)->config().vocab_size;
  const double same = test::WorstRowError(run->prefill, hf_run->prefill.data(), rows, vocab);
  std::printf("[ gpt_oss mxfp4 gguf, q8_0 ] vs the directory quantized at load: %.3g; vs the dequantized f32 model: "
              "prefill %.3g, decode %.3g\n",
              same, run->prefill_error, run->decode_error);
  EXPECT_LE(same, 1e-6);
  EXPECT_EQ(run->decode_top, hf_run->decode_top);
  EXPECT_LE(run->prefill_error, 0.05);
  EXPECT_EQ((*engine)->device().validation_messages(), 0);
  fs::remove_all(a);
  fs::remove_all(b);
}

// A pair whose scales do not match its blocks is an error naming both tensors.
TEST(GptOssMxfp4, MismatchedBlocksAndScalesAreAnError) {
  const fs::path dir = test::MakeTempDir("mxfp4_pair");
  WriteSafetensors(dir / "model.safetensors",
                   {{"w_blocks", {"U8", {2, 3, 16}, std::vector<uint8_t>(96)}},
                    {"w_scales", {"U8", {2, 4}, std::vector<uint8_t>(8)}}});
  absl::StatusOr<std::unique_ptr<formats::WeightStore>> store = formats::OpenSafetensors(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE((*store)->Has("w"));
  absl::Status s = (*store)->Get("w").status();
  EXPECT_NE(std::string(s.message()).find("tensors 'w_blocks' (U8 [2, 3, 16]) and 'w_scales' (U8 [2, 4]) do not make "
                                          "an MXFP4 tensor"),
            std::string::npos)
      << s;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace doppler
