// HF -> GGUF conversion (checkpoints/hf_to_gguf.h, `doppler convert`): the q8_0 and q4_k_m
// conversions of hf/llama_q reproduce llama.cpp's fixture GGUFs tensor for tensor (names, types,
// dims, q/k row permutation, bytes) and key for key; converted files run like their references;
// f16 conversions give the HF directory's tokens; mixtures of experts (hf/mixtral, hf/qwen3_moe)
// convert with their experts stacked as llama.cpp stacks them, run as their HF directories do, and
// take llama-quantize's types; tokenizers survive the trip through GGUF metadata; the CLI reports
// bad GGUF files in one line.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoints/gguf_config.h"
#include "checkpoints/hf_to_gguf.h"
#include "formats/gguf/gguf_file.h"
#include "formats/safetensors.h"
#include "nlohmann/json.hpp"
#include "quant/quant_scheme.h"
#include "runtime/engine.h"
#include "tests/support/fixtures.h"
#include "tests/support/npy.h"
#include "tests/support/reference.h"
#include "tokenizers/gguf_tokenizer.h"

namespace doppler {
namespace {

namespace fs = std::filesystem;
using graph::DType;
using formats::GgufFile;
using formats::GgufValue;
using quant::QuantScheme;

fs::path Fixtures() { return test::FixturesDir(); }

absl::Status Convert(const std::string& model, QuantScheme quant, const fs::path& out, const fs::path& tokenizer = {},
                     const std::string& name = {}) {
  checkpoints::HfToGgufOptions o;
  o.model_dir = Fixtures() / "hf" / model;
  o.out = out;
  o.quant = quant;
  o.tokenizer = tokenizer;
  o.name = name;
  return checkpoints::ConvertHfToGguf(o);
}

// Whether two metadata values (of files a and b) are equal, arrays element by element.
bool SameValue(const GgufFile& fa, const GgufValue& a, const GgufFile& fb, const GgufValue& b) {
  if (a.type != b.type || a.value.index() != b.value.index()) return false;
  if (const auto* arr = std::get_if<formats::GgufArray>(&a.value)) {
    const std::vector<GgufValue> ea = fa.Elements(*arr), eb = fb.Elements(std::get<formats::GgufArray>(b.value));
    if (ea.size() != eb.size()) return false;
    for (size_t i = 0; i < ea.size(); ++i) {
      if (!SameValue(fa, ea[i], fb, eb[i])) return false;
    }
    return true;
  }
  return std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, formats::GgufArray>) {
          return false;
        } else {
          return x == std::get<T>(b.value);
        }
      },
      a.value);
}

struct RunResult {
  double prefill_err = 0, decode_err = 0;
  std::vector<int32_t> greedy;
  std::vector<float> prefill;
};

// Prefill logits of `ids`, then greedy generation of `n` tokens on a fresh sequence; errors
// against `prefill_ref` (rows of ids) when given.
RunResult RunModel(const fs::path& model, std::optional<DType> kv, DType weights, const std::vector<int32_t>& ids, size_t n,
              const float* prefill_ref = nullptr, const std::vector<int32_t>* decode_ids = nullptr,
              const float* decode_ref = nullptr, QuantScheme quant = QuantScheme::kNone) {
  RunResult r;
  runtime::EngineOptions o;
  o.model_path = model;
  o.quant = quant;
  o.weight_dtype = weights;
  o.kv_dtype = kv;
  o.context = 64;
  o.prefill_chunk = 32;
  o.validation = true;
  o.decode_activations = runtime::DecodeActivations::kF32;  // held to the exact engine's tolerance
  absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(o);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return r;
  runtime::Engine& e = **engine;
  const int64_t vocab = e.config().vocab_size;
  absl::StatusOr<std::vector<float>> logits = e.PrefillLogits(ids);
  EXPECT_TRUE(logits.ok()) << logits.status();
  if (!logits.ok()) return r;
  r.prefill = *logits;
  if (prefill_ref != nullptr) r.prefill_err = test::WorstRowError(*logits, prefill_ref, static_cast<int64_t>(ids.size()), vocab);
  if (decode_ids != nullptr) {
    for (size_t i = 0; i < decode_ids->size(); ++i) {
      absl::StatusOr<std::vector<float>> row = e.DecodeLogits((*decode_ids)[i]);
      EXPECT_TRUE(row.ok()) << row.status();
      if (!row.ok()) return r;
      r.decode_err = std::max(r.decode_err, test::WorstRowError(*row, decode_ref + i * vocab, 1, vocab));
    }
  }
  e.Reset();
  absl::StatusOr<int32_t> token = e.Prefill(ids);
  EXPECT_TRUE(token.ok()) << token.status();
  if (!token.ok()) return r;
  r.greedy.push_back(*token);
  while (r.greedy.size() < n) {
    token = e.DecodeNext();
    EXPECT_TRUE(token.ok()) << token.status();
    if (!token.ok()) return r;
    r.greedy.push_back(*token);
  }
  EXPECT_EQ(e.device().validation_messages(), 0);
  return r;
}

class ConvertQuantTest : public ::testing::TestWithParam<std::string> {};

// Our conversion of hf/llama_q against llama.cpp's: every tensor (name, type, dims, bytes) and
// every metadata key. The matrices must be byte-identical (ggml's quantizers, the same Q4_K_M
// choice of Q6_K tensors, llama.cpp's q/k row order); rope_freqs may differ in the last bit
// (the fixture's base frequencies come from torch's float32 pow, ours from the C library's).
TEST_P(ConvertQuantTest, MatchesLlamaCppsFileTensorForTensor) {
  const std::string type = GetParam();
  const fs::path out = test::MakeTempDir("convert_q") / "model.gguf";
  const fs::path fixture = Fixtures() / "gguf" / ("llama_q-" + type + ".gguf");
  absl::StatusOr<std::unique_ptr<GgufFile>> ref = GgufFile::Open(fixture);
  ASSERT_TRUE(ref.ok()) << ref.status();
  absl::StatusOr<std::string> name = (*ref)->GetString("general.name");
  ASSERT_TRUE(name.ok());
  ASSERT_TRUE(Convert("llama_q", type == "Q8_0" ? QuantScheme::kQ8_0 : QuantScheme::kQ4_K_M, out,
                      Fixtures() / "stories260K" / "tok512.bin", *name)
                  .ok());
  absl::StatusOr<std::unique_ptr<GgufFile>> ours = GgufFile::Open(out);
  ASSERT_TRUE(ours.ok()) << ours.status();
  EXPECT_EQ((*ours)->version(), 3u);
  EXPECT_EQ((*ours)->alignment(), 32u);

  // Metadata: the same keys with the same types and values (the tokenizer's too).
  for (const std::string& key : (*ref)->Keys()) {
    const GgufValue* want = (*ref)->Find(key);
    const GgufValue* got = (*ours)->Find(key);
    ASSERT_NE(got, nullptr) << "missing key " << key;
    EXPECT_TRUE(SameValue(**ours, *got, **ref, *want)) << "key " << key;
  }
  EXPECT_EQ((*ours)->Keys().size(), (*ref)->Keys().size()) << absl::StrJoin((*ours)->Keys(), ", ");

  // Tensors.
  ASSERT_EQ((*ours)->Tensors().size(), (*ref)->Tensors().size());
  int identical = 0;
  for (const formats::GgufTensorInfo& want : (*ref)->Tensors()) {
    SCOPED_TRACE(want.name);
    absl::StatusOr<formats::TensorView> a = (*ours)->Get(want.name);
    absl::StatusOr<formats::TensorView> b = (*ref)->Get(want.name);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    EXPECT_EQ(graph::Name(a->dtype), graph::Name(b->dtype));
    ASSERT_EQ(a->shape, b->shape);
    ASSERT_EQ(a->nbytes, b->nbytes);
    const bool same = std::memcmp(a->data, b->data, a->nbytes) == 0;
    identical += same;
    if (want.name == "rope_freqs.weight") {
      const float* x = reinterpret_cast<const float*>(a->data);
      const float* y = reinterpret_cast<const float*>(b->data);
      for (size_t i = 0; i < a->nbytes / 4; ++i) EXPECT_NEAR(x[i], y[i], 1e-6 * std::abs(y[i])) << "divisor " << i;
    } else {
      EXPECT_TRUE(same) << "bytes differ";
    }
  }
  std::printf("[ %s ] %d of %zu tensors byte-identical to llama.cpp's\n", type.c_str(), identical,
              (*ref)->Tensors().size());
}

// A converted file runs like the reference for the same dequantized weights. Its matrices are
// llama.cpp's bytes (above), so the fixture's tolerance for an exact engine applies: max |a - b|
// <= 1e-4 of the row's max |logit| against hf_dequant_*, where the llama.cpp logits differ by up to
// 1.3 % (Q8_0) / 2.2 % (Q4_K_M) and the f32 model by 1.6 % / 16 %.
TEST_P(ConvertQuantTest, ConvertedFileRunsLikeTheDequantizedReference) {
  const std::string type = GetParam();
  const fs::path out = test::MakeTempDir("convert_run") / "model.gguf";
  ASSERT_TRUE(Convert("llama_q", type == "Q8_0" ? QuantScheme::kQ8_0 : QuantScheme::kQ4_K_M, out).ok());
  const nlohmann::json j = test::ReadJsonFile(Fixtures() / "gguf" / "gguf_refs.json");
  const std::vector<int32_t> ids = j["input_ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> greedy = j["types"][type]["hf_dequant"]["greedy_tokens"].get<std::vector<int32_t>>();
  absl::StatusOr<test::NpyArray> prefill = test::ReadNpy(Fixtures() / "gguf" / type / "hf_dequant_prefill_logits.npy");
  absl::StatusOr<test::NpyArray> decode = test::ReadNpy(Fixtures() / "gguf" / type / "hf_dequant_decode_logits.npy");
  ASSERT_TRUE(prefill.ok() && decode.ok());
  RunResult r = RunModel(out, DType::kF32, DType::kF16, ids, greedy.size(), prefill->data.data(), &greedy, decode->data.data());
  std::printf("[ converted %s ] vs hf_dequant: prefill %.3g, decode %.3g of max |logit|\n", type.c_str(), r.prefill_err,
              r.decode_err);
  EXPECT_LE(r.prefill_err, 1e-4);
  EXPECT_LE(r.decode_err, 1e-4);
  EXPECT_EQ(r.greedy, greedy);
}

INSTANTIATE_TEST_SUITE_P(Types, ConvertQuantTest, ::testing::Values("Q8_0", "Q4_K_M"));

// f16 conversions: the GGUF holds the same f16 matrices and f32 vectors as the engine makes of the
// HF directory at --dtype f16, so both compute the same logits and the reference's greedy tokens.
class ConvertF16Test : public ::testing::TestWithParam<std::string> {};

TEST_P(ConvertF16Test, GivesTheHfDirectorysTokensAndLogits) {
  const std::string model = GetParam();
  const fs::path out = test::MakeTempDir("convert_f16") / "model.gguf";
  ASSERT_TRUE(Convert(model, QuantScheme::kF16, out).ok());
  absl::StatusOr<test::HfReference> ref = test::LoadHfReference(model);
  ASSERT_TRUE(ref.ok()) << ref.status();
  RunResult gguf = RunModel(out, DType::kF32, DType::kF16, ref->input_ids, ref->greedy_tokens.size(),
                       ref->prefill_logits.data.data());
  RunResult hf = RunModel(ref->dir, DType::kF32, DType::kF16, ref->input_ids, ref->greedy_tokens.size(),
                     ref->prefill_logits.data.data());
  EXPECT_EQ(gguf.greedy, ref->greedy_tokens);
  EXPECT_EQ(gguf.greedy, hf.greedy);
  ASSERT_EQ(gguf.prefill.size(), hf.prefill.size());
  const double diff = test::WorstRowError(gguf.prefill, hf.prefill.data(), static_cast<int64_t>(ref->input_ids.size()),
                                          static_cast<int64_t>(gguf.prefill.size() / ref->input_ids.size()));
  std::printf("[ %s f16 ] GGUF vs HF dir at f16: %.3g; vs transformers f32: %.3g of max |logit|\n", model.c_str(), diff,
              gguf.prefill_err);
  EXPECT_LE(diff, 1e-6);
  EXPECT_LE(gguf.prefill_err, 2e-2);  // f16 weights, as engine_fixture_test allows
}

INSTANTIATE_TEST_SUITE_P(Models, ConvertF16Test,
                         ::testing::Values("llama", "llama_q", "llama_tied", "qwen2", "qwen3", "phi3", "phi3_longrope",
                                           "qwen3_yarn"));

// Our conversion of hf/NAME against llama.cpp's (gguf/lcpp/NAME-lcpp-f32.gguf): the same tensor
// names and shapes, and the same values for every hyperparameter key both files write.
void ExpectLlamaCppsLayout(const fs::path& ours_path, const std::string& lcpp_name) {
  absl::StatusOr<std::unique_ptr<GgufFile>> ours = GgufFile::Open(ours_path);
  absl::StatusOr<std::unique_ptr<GgufFile>> ref = GgufFile::Open(Fixtures() / "gguf" / "lcpp" / (lcpp_name + "-lcpp-f32.gguf"));
  ASSERT_TRUE(ours.ok() && ref.ok()) << ours.status() << ref.status();
  std::map<std::string, std::vector<int64_t>> want, got;
  for (const formats::GgufTensorInfo& t : (*ref)->Tensors()) want[t.name] = (*(*ref)->Get(t.name)).shape;
  for (const formats::GgufTensorInfo& t : (*ours)->Tensors()) got[t.name] = (*(*ours)->Get(t.name)).shape;
  EXPECT_EQ(got, want);
  int compared = 0;
  for (const std::string& key : (*ref)->Keys()) {
    if (key.starts_with("general.") || key.starts_with("tokenizer.") || (*ours)->Find(key) == nullptr) continue;
    absl::StatusOr<double> a = (*ours)->GetFloat(key), b = (*ref)->GetFloat(key);
    if (a.ok() && b.ok()) {
      EXPECT_EQ(*a, *b) << key;
    } else {
      EXPECT_TRUE(SameValue(**ours, *(*ours)->Find(key), **ref, *(*ref)->Find(key))) << key;
    }
    ++compared;
  }
  EXPECT_GE(compared, 8);
}

TEST(ConvertTest, Phi3AndQwen3AreLaidOutAsLlamaCppWritesThem) {
  for (const char* model : {"phi3", "qwen3", "qwen2", "llama"}) {
    SCOPED_TRACE(model);
    const fs::path out = test::MakeTempDir("convert_lcpp") / "model.gguf";
    ASSERT_TRUE(Convert(model, QuantScheme::kF16, out).ok());
    ExpectLlamaCppsLayout(out, model);
  }
}

// hf/gemma3 has a layer pattern (every 3rd layer global) and a query scale (query_pre_attn_scalar
// 48, head size 64) that a GGUF cannot state and llama.cpp would not assume: converting it is an
// error. The same model with llama.cpp's pattern and scale converts, lays out as llama.cpp's
// file, and runs as the HF directory does.
TEST(ConvertTest, Gemma3ConvertsWhenLlamaCppWouldRunIt) {
  const fs::path tmp = test::MakeTempDir("convert_gemma3");
  absl::Status refused = Convert("gemma3", QuantScheme::kF16, tmp / "refused.gguf");
  EXPECT_TRUE(absl::IsUnimplemented(refused)) << refused;
  EXPECT_NE(refused.message().find("layer pattern"), std::string::npos) << refused;

  const fs::path dir = tmp / "gemma3_llamacpp";
  fs::create_directories(dir);
  nlohmann::json config = test::ReadJsonFile(Fixtures() / "hf" / "gemma3" / "config.json");
  config.erase("layer_types");
  config["sliding_window_pattern"] = 6;
  config["_sliding_window_pattern"] = 6;
  config["query_pre_attn_scalar"] = config["head_dim"];
  std::ofstream(dir / "config.json") << config.dump();
  fs::create_symlink(Fixtures() / "hf" / "gemma3" / "model.safetensors", dir / "model.safetensors");
  checkpoints::HfToGgufOptions o;
  o.model_dir = dir;
  o.out = tmp / "gemma3.gguf";
  o.quant = QuantScheme::kF16;
  absl::Status s = checkpoints::ConvertHfToGguf(o);
  ASSERT_TRUE(s.ok()) << s;
  ExpectLlamaCppsLayout(o.out, "gemma3");
  absl::StatusOr<test::HfReference> ref = test::LoadHfReference("gemma3");
  ASSERT_TRUE(ref.ok()) << ref.status();
  RunResult gguf = RunModel(o.out, DType::kF32, DType::kF16, ref->input_ids, ref->greedy_tokens.size());
  RunResult hf = RunModel(dir, DType::kF32, DType::kF16, ref->input_ids, ref->greedy_tokens.size());
  EXPECT_EQ(gguf.greedy, hf.greedy);
  ASSERT_EQ(gguf.prefill.size(), hf.prefill.size());
  const double diff = test::WorstRowError(gguf.prefill, hf.prefill.data(), static_cast<int64_t>(ref->input_ids.size()),
                                          static_cast<int64_t>(gguf.prefill.size() / ref->input_ids.size()));
  std::printf("[ gemma3 f16 ] GGUF vs HF dir at f16: %.3g of max |logit|\n", diff);
  EXPECT_LE(diff, 1e-5);  // the norms come back as (w + 1) - 1 in f32
}

// q4_k_m of a model whose rows are not whole 256-value blocks (hf/qwen3: 128 wide, tied): the file
// holds llama.cpp's substitutes (Q5_0 for Q4_K, Q8_0 for the Q6_K head), and runs as the HF
// directory quantized at load does, with the same bytes; both stay near transformers' f32 logits.
TEST(ConvertTest, Q4KMWithQ5_0RunsAsTheDirectoryQuantizedAtLoad) {
  const fs::path out = test::MakeTempDir("convert_q5_0") / "model.gguf";
  ASSERT_TRUE(Convert("qwen3", QuantScheme::kQ4_K_M, out).ok());
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(out);
  ASSERT_TRUE(file.ok()) << file.status();
  std::map<std::string, int> types;
  for (const formats::GgufTensorInfo& t : (*file)->Tensors()) {
    absl::StatusOr<formats::TensorView> v = (*file)->Get(t.name);
    ASSERT_TRUE(v.ok()) << v.status();
    ++types[graph::Name(v->dtype)];
  }
  EXPECT_GT(types["q5_0"], 0);
  EXPECT_GT(types["q8_0"], 0);
  EXPECT_EQ(types["q4_k"] + types["q6_k"], 2) << "the two layers' down projections (rows of 256) alone";
  absl::StatusOr<test::HfReference> ref = test::LoadHfReference("qwen3");
  ASSERT_TRUE(ref.ok()) << ref.status();
  const size_t n = ref->greedy_tokens.size();
  RunResult gguf = RunModel(out, DType::kF32, DType::kF16, ref->input_ids, n, ref->prefill_logits.data.data());
  RunResult hf = RunModel(ref->dir, DType::kF32, DType::kF16, ref->input_ids, n, ref->prefill_logits.data.data(), nullptr,
                          nullptr, QuantScheme::kQ4_K_M);
  ASSERT_EQ(gguf.prefill.size(), hf.prefill.size());
  const int64_t rows = static_cast<int64_t>(ref->input_ids.size());
  const double diff = test::WorstRowError(gguf.prefill, hf.prefill.data(), rows, static_cast<int64_t>(gguf.prefill.size()) / rows);
  std::printf("[ qwen3 q4_k_m ] GGUF vs HF dir quantized at load: %.3g; vs transformers f32: %.3g of max |logit|\n", diff,
              gguf.prefill_err);
  EXPECT_LE(diff, 1e-6);
  EXPECT_EQ(gguf.greedy, hf.greedy);
  // Quantization's own error: 0.27 of the largest logit for this random 128-wide model (llama_q's
  // Q4_K_M: 0.16); logits from wrong weights are off by about their whole range.
  EXPECT_LE(gguf.prefill_err, 0.4);
}

// q5_k_m, q4_0 and iq4_xs choose each tensor's type as llama-quantize did for the same model
// (quant/types/llama_q-TYPE.gguf), and the converted file runs.
class ConvertQuantTypesTest : public ::testing::TestWithParam<std::pair<QuantScheme, std::string>> {};

TEST_P(ConvertQuantTypesTest, ChoosesLlamaQuantizesTypes) {
  const auto& [scheme, type] = GetParam();
  const fs::path out = test::MakeTempDir("convert_types") / "model.gguf";
  ASSERT_TRUE(Convert("llama_q", scheme, out).ok());
  absl::StatusOr<std::unique_ptr<GgufFile>> ours = GgufFile::Open(out);
  absl::StatusOr<std::unique_ptr<GgufFile>> ref = GgufFile::Open(Fixtures() / "quant" / "types" / ("llama_q-" + type + ".gguf"));
  ASSERT_TRUE(ours.ok() && ref.ok()) << ours.status() << ref.status();
  std::map<std::string, std::string> got, want;
  for (const formats::GgufTensorInfo& t : (*ours)->Tensors()) got[t.name] = graph::Name(t.dtype);
  for (const formats::GgufTensorInfo& t : (*ref)->Tensors()) want[t.name] = graph::Name(t.dtype);
  EXPECT_EQ(got, want);
  absl::StatusOr<int64_t> file_type = (*ours)->GetInt("general.file_type");
  absl::StatusOr<int64_t> ref_file_type = (*ref)->GetInt("general.file_type");
  ASSERT_TRUE(file_type.ok() && ref_file_type.ok());
  EXPECT_EQ(*file_type, *ref_file_type);
  absl::StatusOr<test::HfReference> hf = test::LoadHfReference("llama_q");
  ASSERT_TRUE(hf.ok()) << hf.status();
  RunResult r = RunModel(out, DType::kF32, DType::kF16, hf->input_ids, 4, hf->prefill_logits.data.data());
  // Quantization's own error (quant_types_model_test: up to 0.3 of the largest logit for 4 bits on
  // this model); logits from wrong weights are off by about their whole range.
  EXPECT_LE(r.prefill_err, 0.5);
}

INSTANTIATE_TEST_SUITE_P(Schemes, ConvertQuantTypesTest,
                         ::testing::Values(std::pair{QuantScheme::kQ5_K_M, std::string("Q5_K_M")},
                                           std::pair{QuantScheme::kQ4_0, std::string("Q4_0")},
                                           std::pair{QuantScheme::kIQ4_XS, std::string("IQ4_XS")}),
                         [](const auto& i) { return i.param.second; });

TEST(ConvertTest, QuantRuleIsLlamaCppsQ4KM) {
  using quant::QuantizedDType;
  auto q = [](const std::string& name, int layers, bool tied = false, int64_t cols = 4096) {
    return graph::Name(QuantizedDType(QuantScheme::kQ4_K_M, name, cols, layers, tied, 0, DType::kF16));
  };
  // The fixture llama_q (2 layers): output, layer 1's v and down.
  EXPECT_STREQ(q("lm_head.weight", 2), "q6_k");
  EXPECT_STREQ(q("model.embed_tokens.weight", 2), "q4_k");
  EXPECT_STREQ(q("model.embed_tokens.weight", 2, /*tied=*/true), "q6_k");
  EXPECT_STREQ(q("model.layers.0.self_attn.v_proj.weight", 2), "q4_k");
  EXPECT_STREQ(q("model.layers.1.self_attn.v_proj.weight", 2), "q6_k");
  EXPECT_STREQ(q("model.layers.1.mlp.down_proj.weight", 2), "q6_k");
  EXPECT_STREQ(q("model.layers.1.self_attn.q_proj.weight", 2), "q4_k");
  // 32 layers: the first and last 4, and every third from layer 6.
  std::vector<int> more;
  for (int l = 0; l < 32; ++l) {
    if (std::string(q("model.layers." + std::to_string(l) + ".mlp.down_proj.weight", 32)) == "q6_k") more.push_back(l);
  }
  EXPECT_EQ(more, (std::vector<int>{0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31}));
  // Rows that are not whole 256-blocks take llama.cpp's substitute of 32-value blocks (Q5_0 for
  // Q4_K, Q8_0 for Q6_K), then the float type.
  EXPECT_STREQ(q("model.layers.0.mlp.up_proj.weight", 2, false, 96), "q5_0");
  EXPECT_STREQ(q("model.layers.1.self_attn.v_proj.weight", 2, false, 96), "q8_0");
  EXPECT_STREQ(q("model.embed_tokens.weight", 2, /*tied=*/true, 1152), "q8_0");
  EXPECT_STREQ(q("model.layers.0.mlp.up_proj.weight", 2, false, 100), "f16");
  // The other schemes' substitutes: Q5_1 for Q5_K, IQ4_NL for IQ4_XS.
  EXPECT_STREQ(graph::Name(QuantizedDType(QuantScheme::kQ5_K_M, "model.layers.0.mlp.up_proj.weight", 96, 2, false, 0, DType::kF16)),
               "q5_1");
  EXPECT_STREQ(graph::Name(QuantizedDType(QuantScheme::kIQ4_XS, "model.layers.0.mlp.up_proj.weight", 96, 2, false, 0, DType::kF16)),
               "iq4_nl");
  EXPECT_STREQ(graph::Name(QuantizedDType(QuantScheme::kIQ4_XS, "lm_head.weight", 4096, 2, false, 0, DType::kF16)), "q6_k");
  EXPECT_STREQ(graph::Name(QuantizedDType(QuantScheme::kQ4_0, "model.embed_tokens.weight", 4096, 2, true, 0, DType::kF16)), "q6_k");
  // Mixtures of experts: an expert's down projection is a down projection (llama.cpp's
  // ffn_down_exps), its gate and up Q4_K; the router stays f32 under every scheme.
  EXPECT_STREQ(q("model.layers.1.mlp.experts.5.down_proj.weight", 2), "q6_k");
  EXPECT_STREQ(q("model.layers.0.mlp.experts.5.down_proj.weight", 2), "q4_k");
  EXPECT_STREQ(q("model.layers.1.block_sparse_moe.experts.0.w2.weight", 2), "q6_k");
  EXPECT_STREQ(q("model.layers.1.block_sparse_moe.experts.0.w1.weight", 2), "q4_k");
  EXPECT_STREQ(q("model.layers.1.mlp.gate.weight", 2), "f32");
  EXPECT_STREQ(q("model.layers.0.block_sparse_moe.gate.weight", 2), "f32");
  EXPECT_STREQ(graph::Name(QuantizedDType(QuantScheme::kQ8_0, "model.layers.0.mlp.gate.weight", 4096, 2, false, 8,
                                          DType::kF16)),
               "f32");
  // llama.cpp's rule for models of exactly 8 experts a layer (Mixtral 8x7B): attention k and v
  // Q8_0 under every scheme, the attention output Q5_K under Q4_K_M and IQ4_XS.
  auto moe = [](QuantScheme scheme, const std::string& part, int64_t experts) {
    return graph::Name(QuantizedDType(scheme, "model.layers.5.self_attn." + part + ".weight", 4096, 32, false, experts,
                                      DType::kF16));
  };
  for (QuantScheme scheme : {QuantScheme::kQ4_K_M, QuantScheme::kQ5_K_M, QuantScheme::kQ6_K, QuantScheme::kQ4_0,
                             QuantScheme::kIQ4_XS, QuantScheme::kQ8_0}) {
    SCOPED_TRACE(QuantSchemeName(scheme));
    EXPECT_STREQ(moe(scheme, "k_proj", 8), "q8_0");
    EXPECT_STREQ(moe(scheme, "v_proj", 8), "q8_0");
  }
  EXPECT_STREQ(moe(QuantScheme::kQ4_K_M, "o_proj", 8), "q5_k");
  EXPECT_STREQ(moe(QuantScheme::kIQ4_XS, "o_proj", 8), "q5_k");
  EXPECT_STREQ(moe(QuantScheme::kQ4_0, "o_proj", 8), "q4_0");
  EXPECT_STREQ(moe(QuantScheme::kQ4_K_M, "q_proj", 8), "q4_k");
  EXPECT_STREQ(moe(QuantScheme::kQ4_K_M, "k_proj", 4), "q4_k");
  EXPECT_STREQ(moe(QuantScheme::kQ4_K_M, "o_proj", 128), "q4_k");
}

// --- Mixtures of experts ---------------------------------------------------------------------

// The type llama-quantize gives each tensor of the 2-layer fixtures hf/mixtral (4 experts, rows of
// 128 and 96 values) and hf/qwen3_moe (8 experts, rows of 128, 192 and 64) at q4_k_m, from its
// rules: rows that are no whole 256-value blocks take Q5_0 for Q4_K, Q8_0 for Q6_K, Q5_1 for Q5_K;
// the head Q6_K; v and down (ffn_down_exps) of layer 1 of 2 Q6_K; with 8 experts attn_k and attn_v
// Q8_0 and attn_output Q5_K; the router ffn_gate_inp and the vectors F32.
std::string LlamaQuantizeQ4KMType(const std::string& model, const std::string& tensor) {
  const bool qwen = model == "qwen3_moe";
  if (tensor.ends_with("norm.weight") || tensor.find("ffn_gate_inp") != std::string::npos) return "f32";
  if (tensor == "output.weight") return "q8_0";
  const bool layer1 = tensor.starts_with("blk.1.");
  if (tensor.find("attn_k.") != std::string::npos) return qwen ? "q8_0" : "q5_0";
  if (tensor.find("attn_v.") != std::string::npos) return qwen || layer1 ? "q8_0" : "q5_0";
  if (tensor.find("attn_output.") != std::string::npos) return qwen ? "q5_1" : "q5_0";
  if (tensor.find("ffn_down_exps") != std::string::npos) return layer1 ? "q8_0" : "q5_0";
  return "q5_0";  // token_embd, attn_q, ffn_gate_exps, ffn_up_exps
}

class ConvertMoeTest : public ::testing::TestWithParam<std::string> {};

// f32: the file holds exactly the checkpoint's values, experts stacked, so it computes what the HF
// directory does at f32, and transformers' logits. llama.cpp's own Mixtral file (gguf/lcpp) is the
// same file: the same tensors, byte for byte, and the same hyperparameter keys.
TEST_P(ConvertMoeTest, F32RoundTripComputesAsTheHfDirectory) {
  const std::string model = GetParam();
  const fs::path out = test::MakeTempDir("convert_moe_f32") / "model.gguf";
  ASSERT_TRUE(Convert(model, QuantScheme::kF32, out).ok());
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(out);
  ASSERT_TRUE(file.ok()) << file.status();
  const std::string arch = model == "mixtral" ? "llama" : "qwen3moe";
  const int64_t experts = model == "mixtral" ? 4 : 8, width = model == "mixtral" ? 96 : 64;
  EXPECT_EQ(*(*file)->GetString("general.architecture"), arch);
  EXPECT_EQ(*(*file)->GetInt(arch + ".expert_count"), experts);
  EXPECT_EQ(*(*file)->GetInt(arch + ".expert_used_count"), 2);
  if (model == "qwen3_moe") {
    EXPECT_EQ(*(*file)->GetInt("qwen3moe.expert_feed_forward_length"), width);
  }
  for (int l = 0; l < 2; ++l) {
    const std::string b = absl::StrCat("blk.", l, ".");
    EXPECT_EQ((*(*file)->Get(b + "ffn_gate_inp.weight")).shape, (std::vector<int64_t>{experts, 128}));
    EXPECT_EQ((*(*file)->Get(b + "ffn_gate_exps.weight")).shape, (std::vector<int64_t>{experts, width, 128}));
    EXPECT_EQ((*(*file)->Get(b + "ffn_up_exps.weight")).shape, (std::vector<int64_t>{experts, width, 128}));
    EXPECT_EQ((*(*file)->Get(b + "ffn_down_exps.weight")).shape, (std::vector<int64_t>{experts, 128, width}));
  }
  if (model == "mixtral") {
    ExpectLlamaCppsLayout(out, "mixtral");
    absl::StatusOr<std::unique_ptr<GgufFile>> lcpp = GgufFile::Open(Fixtures() / "gguf" / "lcpp" / "mixtral-lcpp-f32.gguf");
    ASSERT_TRUE(lcpp.ok()) << lcpp.status();
    for (const formats::GgufTensorInfo& t : (*lcpp)->Tensors()) {
      absl::StatusOr<formats::TensorView> a = (*file)->Get(t.name), b = (*lcpp)->Get(t.name);
      ASSERT_TRUE(a.ok() && b.ok()) << t.name;
      EXPECT_TRUE(a->nbytes == b->nbytes && std::memcmp(a->data, b->data, a->nbytes) == 0) << t.name << " differs";
    }
  }
  absl::StatusOr<test::HfReference> ref = test::LoadHfReference(model);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const size_t n = ref->greedy_tokens.size();
  RunResult gguf = RunModel(out, DType::kF32, DType::kF32, ref->input_ids, n, ref->prefill_logits.data.data(),
                            &ref->greedy_tokens, ref->decode_logits.data.data());
  RunResult hf = RunModel(ref->dir, DType::kF32, DType::kF32, ref->input_ids, n);
  ASSERT_EQ(gguf.prefill.size(), hf.prefill.size());
  const int64_t rows = static_cast<int64_t>(ref->input_ids.size());
  const double diff = test::WorstRowError(gguf.prefill, hf.prefill.data(), rows, static_cast<int64_t>(gguf.prefill.size()) / rows);
  std::printf("[ %s f32 ] GGUF vs HF dir: %.3g; vs transformers: prefill %.3g, decode %.3g of max |logit|\n", model.c_str(),
              diff, gguf.prefill_err, gguf.decode_err);
  EXPECT_LE(diff, 1e-6);
  EXPECT_LE(gguf.prefill_err, 1e-4);
  EXPECT_LE(gguf.decode_err, 1e-4);
  EXPECT_EQ(gguf.greedy, ref->greedy_tokens);
}

// q8_0 and q4_k_m: each tensor in llama-quantize's type (the router F32, every expert of a stack
// alike), and the file runs as the HF directory quantized at load does (the same bytes: at most
// 1e-6 of the largest logit apart, the same tokens), near transformers' f32 logits.
TEST_P(ConvertMoeTest, QuantizedFilesRunAsTheDirectoryQuantizedAtLoad) {
  const std::string model = GetParam();
  absl::StatusOr<test::HfReference> ref = test::LoadHfReference(model);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const size_t n = ref->greedy_tokens.size();
  const int64_t rows = static_cast<int64_t>(ref->input_ids.size());
  for (QuantScheme scheme : {QuantScheme::kQ8_0, QuantScheme::kQ4_K_M}) {
    SCOPED_TRACE(QuantSchemeName(scheme));
    const fs::path out = test::MakeTempDir("convert_moe_q") / "model.gguf";
    ASSERT_TRUE(Convert(model, scheme, out).ok());
    absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(out);
    ASSERT_TRUE(file.ok()) << file.status();
    for (const formats::GgufTensorInfo& t : (*file)->Tensors()) {
      const bool vector = t.dims.size() == 1 || t.name.find("ffn_gate_inp") != std::string::npos;
      const std::string want = scheme == QuantScheme::kQ8_0 ? (vector ? "f32" : "q8_0") : LlamaQuantizeQ4KMType(model, t.name);
      EXPECT_EQ(graph::Name(t.dtype), want) << t.name;
    }
    RunResult gguf = RunModel(out, DType::kF32, DType::kF16, ref->input_ids, n, ref->prefill_logits.data.data());
    RunResult hf = RunModel(ref->dir, DType::kF32, DType::kF16, ref->input_ids, n, ref->prefill_logits.data.data(), nullptr,
                            nullptr, scheme);
    ASSERT_EQ(gguf.prefill.size(), hf.prefill.size());
    const double diff = test::WorstRowError(gguf.prefill, hf.prefill.data(), rows, static_cast<int64_t>(gguf.prefill.size()) / rows);
    std::printf("[ %s %s ] GGUF vs HF dir quantized at load: %.3g; vs transformers f32: %.3g of max |logit|\n",
                model.c_str(), QuantSchemeName(scheme), diff, gguf.prefill_err);
    EXPECT_LE(diff, 1e-6);
    EXPECT_EQ(gguf.greedy, hf.greedy);
    // Q8_0: the bound the Q8_0 model tests hold against float logits (5 % of the largest logit;
    // mixtral 0.015, qwen3_moe 0.022 here). Q4_K_M's mix on these rows of 64 to 192 values is
    // mostly Q5_0, whose error a token's change of experts carries whole into the logits (mixtral
    // 0.46, qwen3_moe 0.38; the dense hf/qwen3 0.27 above): the check that the file is right is the
    // equality with the directory quantized at load, whose Q8_0 form is the one near transformers.
    EXPECT_LE(gguf.prefill_err, scheme == QuantScheme::kQ8_0 ? 0.05 : 0.6);
    if (scheme == QuantScheme::kQ8_0) {
      EXPECT_EQ(gguf.greedy, ref->greedy_tokens);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ConvertMoeTest, ::testing::Values("mixtral", "qwen3_moe"));

// --- GPT-OSS (llama.cpp's gpt-oss) --------------------------------------------------------------

// The file's bytes with the first occurrence of `from` replaced by `to` (of the same length).
std::string Replaced(std::string bytes, const std::string& from, const std::string& to) {
  const size_t at = bytes.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) bytes.replace(at, from.size(), to);
  return bytes;
}

void WriteFile(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

// hf/gpt_oss converted to f32 holds what llama.cpp's loader (src/models/openai-moe.cpp) asks for,
// under its names, shapes (ggml order: innermost first) and keys, with HF's interleaved gate_up_proj
// split into gate (even columns) and up (odd), every expert matrix [out, in]; and it computes
// transformers' logits (doppler's own key keeps transformers' unrounded YaRN ramp: truncate false).
TEST(ConvertGptOssTest, F32RoundTripComputesAsTransformers) {
  const fs::path out = test::MakeTempDir("convert_gpt_oss") / "model.gguf";
  ASSERT_TRUE(Convert("gpt_oss", QuantScheme::kF32, out).ok());
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(out);
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  EXPECT_EQ(*f.GetString("general.architecture"), "gpt-oss");
  for (auto [key, want] : {std::pair{"context_length", 512}, std::pair{"embedding_length", 128}, std::pair{"block_count", 2},
                           std::pair{"attention.head_count", 4}, std::pair{"attention.head_count_kv", 2},
                           std::pair{"expert_count", 4}, std::pair{"expert_used_count", 2},
                           std::pair{"expert_feed_forward_length", 64}, std::pair{"attention.sliding_window", 8},
                           std::pair{"rope.scaling.original_context_length", 64}}) {
    absl::StatusOr<int64_t> v = f.GetInt(std::string("gpt-oss.") + key);
    EXPECT_TRUE(v.ok() && *v == want) << key;
  }
  EXPECT_EQ(*f.GetString("gpt-oss.rope.scaling.type"), "yarn");
  EXPECT_EQ(*f.GetFloat("gpt-oss.rope.scaling.factor"), 8.0);
  EXPECT_EQ(*f.GetFloat("gpt-oss.rope.freq_base"), 150000.0);
  EXPECT_EQ(*f.GetFloat("gpt-oss.rope.scaling.yarn_beta_fast"), 32.0);
  EXPECT_EQ(*f.GetFloat("gpt-oss.rope.scaling.yarn_beta_slow"), 1.0);
  EXPECT_FLOAT_EQ(static_cast<float>(*f.GetFloat("gpt-oss.attention.layer_norm_rms_epsilon")), 1e-5f);
  EXPECT_EQ(*f.GetBool("gpt-oss.rope.scaling.yarn_truncate"), false);
  // llama.cpp's create_tensor dims, innermost first.
  std::map<std::string, std::vector<int64_t>> dims = {
      {"token_embd.weight", {128, 384}},         {"output_norm.weight", {128}},
      {"output.weight", {128, 384}},             {"blk.1.attn_norm.weight", {128}},
      {"blk.1.post_attention_norm.weight", {128}}, {"blk.1.attn_q.weight", {128, 128}},
      {"blk.1.attn_q.bias", {128}},              {"blk.1.attn_k.weight", {128, 64}},
      {"blk.1.attn_v.bias", {64}},               {"blk.1.attn_output.weight", {128, 128}},
      {"blk.1.attn_output.bias", {128}},         {"blk.1.attn_sinks.weight", {4}},
      {"blk.1.ffn_gate_inp.weight", {128, 4}},   {"blk.1.ffn_gate_inp.bias", {4}},
      {"blk.1.ffn_gate_exps.weight", {128, 64, 4}}, {"blk.1.ffn_up_exps.weight", {128, 64, 4}},
      {"blk.1.ffn_down_exps.weight", {64, 128, 4}}, {"blk.1.ffn_gate_exps.bias", {64, 4}},
      {"blk.1.ffn_up_exps.bias", {64, 4}},       {"blk.1.ffn_down_exps.bias", {128, 4}}};
  for (const formats::GgufTensorInfo& t : f.Tensors()) {
    if (auto it = dims.find(t.name); it != dims.end()) {
      EXPECT_EQ(t.dims, it->second) << t.name;
      EXPECT_EQ(graph::Name(t.dtype), std::string("f32")) << t.name;
      dims.erase(it);
    }
  }
  EXPECT_TRUE(dims.empty()) << "missing: " << dims.begin()->first;
  EXPECT_EQ(f.Tensors().size(), 3u + 2 * 19) << "per layer: 2 norms, q/k/v/o and their biases, sinks, router and "
                                                 "its bias, 3 expert stacks and their biases";

  // The experts' values against the checkpoint's: gate = even, up = odd columns of gate_up_proj
  // [E, hidden, 2I]; down_proj [E, I, hidden] transposed.
  absl::StatusOr<std::unique_ptr<formats::WeightStore>> hf = formats::OpenSafetensors(Fixtures() / "hf" / "gpt_oss");
  ASSERT_TRUE(hf.ok()) << hf.status();
  auto floats = [](const formats::TensorView& t) { return reinterpret_cast<const float*>(t.data); };
  const formats::TensorView gate_up = *(*hf)->Get("model.layers.1.mlp.experts.gate_up_proj");
  const formats::TensorView gate_up_bias = *(*hf)->Get("model.layers.1.mlp.experts.gate_up_proj_bias");
  const formats::TensorView down = *(*hf)->Get("model.layers.1.mlp.experts.down_proj");
  const formats::TensorView gate = *f.Get("blk.1.ffn_gate_exps.weight"), up = *f.Get("blk.1.ffn_up_exps.weight");
  const formats::TensorView gate_bias = *f.Get("blk.1.ffn_gate_exps.bias"), up_bias = *f.Get("blk.1.ffn_up_exps.bias");
  const formats::TensorView down_exps = *f.Get("blk.1.ffn_down_exps.weight");
  for (int64_t e : {0, 3}) {
    for (int64_t i : {0, 5, 63}) {
      for (int64_t h : {0, 77, 127}) {
        EXPECT_EQ(floats(gate)[(e * 64 + i) * 128 + h], floats(gate_up)[(e * 128 + h) * 128 + 2 * i]);
        EXPECT_EQ(floats(up)[(e * 64 + i) * 128 + h], floats(gate_up)[(e * 128 + h) * 128 + 2 * i + 1]);
        EXPECT_EQ(floats(down_exps)[(e * 128 + h) * 64 + i], floats(down)[(e * 64 + i) * 128 + h]);
      }
      EXPECT_EQ(floats(gate_bias)[e * 64 + i], floats(gate_up_bias)[e * 128 + 2 * i]);
      EXPECT_EQ(floats(up_bias)[e * 64 + i], floats(gate_up_bias)[e * 128 + 2 * i + 1]);
    }
  }

  absl::StatusOr<test::HfReference> ref = test::LoadHfReference("gpt_oss");
  ASSERT_TRUE(ref.ok()) << ref.status();
  const size_t n = ref->greedy_tokens.size();
  RunResult gguf = RunModel(out, DType::kF32, DType::kF32, ref->input_ids, n, ref->prefill_logits.data.data(),
                            &ref->greedy_tokens, ref->decode_logits.data.data());
  std::printf("[ gpt_oss f32 GGUF ] vs transformers: prefill %.3g, decode %.3g of max |logit|\n", gguf.prefill_err,
              gguf.decode_err);
  EXPECT_LE(gguf.prefill_err, 1e-4);
  EXPECT_LE(gguf.decode_err, 1e-4);
  EXPECT_EQ(gguf.greedy, ref->greedy_tokens);

  // Without doppler's truncate key the file is what llama.cpp's converter writes, and it is read as
  // llama.cpp runs it: YaRN's ramp ends rounded to whole dimensions, another rope than transformers'.
  const fs::path rounded = out.parent_path() / "rounded.gguf";
  WriteFile(rounded, Replaced(test::ReadFileBytes(out), "gpt-oss.rope.scaling.yarn_truncate", "gpt-oss.rope.scaling.yarn_truncatx"));
  absl::StatusOr<std::unique_ptr<GgufFile>> r = GgufFile::Open(rounded);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<formats::ModelConfig> config = checkpoints::ConfigFromGguf(**r);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->rope.scaling.truncate);
  EXPECT_EQ(config->rope.scaling.type, "yarn");
  EXPECT_EQ(config->rope.scaling.beta_fast, 32.0f);
}

// q8_0: every matrix Q8_0 but the router (F32), the experts split and transposed before they are
// quantized, so the file runs as the HF directory quantized at load.
TEST(ConvertGptOssTest, Q8_0RunsAsTheDirectoryQuantizedAtLoad) {
  absl::StatusOr<test::HfReference> ref = test::LoadHfReference("gpt_oss");
  ASSERT_TRUE(ref.ok()) << ref.status();
  const fs::path out = test::MakeTempDir("convert_gpt_oss_q8") / "model.gguf";
  ASSERT_TRUE(Convert("gpt_oss", QuantScheme::kQ8_0, out).ok());
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(out);
  ASSERT_TRUE(file.ok()) << file.status();
  for (const formats::GgufTensorInfo& t : (*file)->Tensors()) {
    const bool f32 = t.dims.size() == 1 || t.name.find("ffn_gate_inp") != std::string::npos || t.name.ends_with(".bias");
    EXPECT_EQ(graph::Name(t.dtype), std::string(f32 ? "f32" : "q8_0")) << t.name;
  }
  const size_t n = ref->greedy_tokens.size();
  const int64_t rows = static_cast<int64_t>(ref->input_ids.size());
  RunResult gguf = RunModel(out, DType::kF32, DType::kF16, ref->input_ids, n, ref->prefill_logits.data.data());
  RunResult hf = RunModel(ref->dir, DType::kF32, DType::kF16, ref->input_ids, n, ref->prefill_logits.data.data(), nullptr,
                          nullptr, QuantScheme::kQ8_0);
  ASSERT_EQ(gguf.prefill.size(), hf.prefill.size());
  const double diff = test::WorstRowError(gguf.prefill, hf.prefill.data(), rows, static_cast<int64_t>(gguf.prefill.size()) / rows);
  std::printf("[ gpt_oss q8_0 GGUF ] vs the HF dir quantized at load: %.3g; vs transformers f32: %.3g of max |logit|\n", diff,
              gguf.prefill_err);
  EXPECT_LE(diff, 1e-6);
  EXPECT_EQ(gguf.greedy, hf.greedy);
  // Against transformers the directory's Q8_0 is held by MoeQ8EngineTest, which leaves out the rows
  // where a router's near tie can flip an expert under rounding (0.024 of the largest logit there;
  // over every row, 0.37 here).
}

// A gpt-oss file lacking what llama.cpp's loader requires gives one error naming it.
TEST(ConvertGptOssTest, BadFilesAreNamed) {
  const fs::path dir = test::MakeTempDir("convert_gpt_oss_bad");
  const fs::path good = dir / "model.gguf";
  ASSERT_TRUE(Convert("gpt_oss", QuantScheme::kF32, good).ok());
  const std::string bytes = test::ReadFileBytes(good);
  auto open_error = [&](const std::string& name, const std::string& edited) {
    const fs::path p = dir / name;
    WriteFile(p, edited);
    runtime::EngineOptions o;
    o.model_path = p;
    o.context = 64;
    absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(o);
    EXPECT_FALSE(engine.ok()) << name;
    return engine.ok() ? std::string() : std::string(engine.status().message());
  };
  // blk.1.attn_sinks.weight renamed.
  EXPECT_THAT(open_error("nosinks.gguf", Replaced(bytes, "blk.1.attn_sinks.weight", "blk.1.attn_sinkz.weight")),
              ::testing::HasSubstr("blk.1.attn_sinks.weight"));
  // gpt-oss.expert_count (a u32 after its key and type) made 3: the router is [4, 128].
  std::string three = bytes;
  const size_t key = three.find("gpt-oss.expert_count");
  ASSERT_NE(key, std::string::npos);
  const size_t value = key + std::string("gpt-oss.expert_count").size() + 4;
  ASSERT_EQ(three[value], 4);
  three[value] = 3;
  EXPECT_THAT(open_error("experts3.gguf", three),
              ::testing::HasSubstr("tensor blk.0.ffn_gate_inp.weight is [4, 128] but the metadata gives [3, 128] "
                                   "(gpt-oss.expert_count x gpt-oss.embedding_length)"));
  EXPECT_THAT(open_error("nowidth.gguf", Replaced(bytes, "gpt-oss.expert_feed_forward_length",
                                                   "gpt-oss.expert_feed_forward_lengtx")),
              ::testing::HasSubstr("gpt-oss.expert_feed_forward_length is missing (llama.cpp requires it for gpt-oss)"));
  EXPECT_THAT(open_error("nowindow.gguf",
                         Replaced(bytes, "gpt-oss.attention.sliding_window", "gpt-oss.attention.sliding_windox")),
              ::testing::HasSubstr("gpt-oss.attention.sliding_window is missing"));
  EXPECT_THAT(open_error("nobias.gguf", Replaced(bytes, "blk.0.ffn_down_exps.bias", "blk.0.ffn_down_exps.biaz")),
              ::testing::HasSubstr("tensor blk.0.ffn_down_exps.bias is missing"));
}

// Tokenizer metadata both ways: tokenizer.json -> GGUF file -> tokenizer, checked against HF's own
// encodings of 45 strings (ids with and without special tokens, decoded text).
class GgufTokenizerRoundTripTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufTokenizerRoundTripTest, EncodesAndDecodesLikeTokenizerJson) {
  const std::string name = GetParam();
  const fs::path dir = test::MakeTempDir("gguf_tok_" + name);
  const fs::path tok_dir = Fixtures() / "tokenizers" / name;
  const std::string unpack = "tar xzf '" + (tok_dir / "tokenizer.tar.gz").string() + "' -C '" + dir.string() + "'";
  ASSERT_EQ(std::system(unpack.c_str()), 0);
  // A model directory: the tiny llama's weights with this tokenizer.
  for (const char* f : {"config.json", "model.safetensors"}) fs::create_symlink(Fixtures() / "hf" / "llama" / f, dir / f);
  checkpoints::HfToGgufOptions o;
  o.model_dir = dir;
  o.out = dir / "model.gguf";
  o.quant = QuantScheme::kF16;
  absl::Status s = checkpoints::ConvertHfToGguf(o);
  ASSERT_TRUE(s.ok()) << s;
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(o.out);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*(*file)->GetString("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(*(*file)->GetString("tokenizer.ggml.pre"), name == "llama3" ? "llama-bpe" : "qwen2");
  absl::StatusOr<std::unique_ptr<tokenizers::Tokenizer>> tok = tokenizers::LoadGgufTokenizer(**file);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const nlohmann::json enc = test::ReadJsonFile(tok_dir / "encodings.json");
  EXPECT_EQ((*tok)->vocab_size(), enc["vocab_size_with_added"].get<int32_t>());
  int passed = 0;
  for (const nlohmann::json& c : enc["cases"]) {
    const std::string text = c["text"];
    absl::StatusOr<std::vector<int32_t>> plain = (*tok)->Encode(text, false);
    absl::StatusOr<std::vector<int32_t>> special = (*tok)->Encode(text, true);
    ASSERT_TRUE(plain.ok() && special.ok()) << text;
    const std::vector<int32_t> ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(*plain, ids) << "text: " << text;
    EXPECT_EQ(*special, c["ids_add_special_tokens"].get<std::vector<int32_t>>()) << "text: " << text;
    EXPECT_EQ((*tok)->Decode(ids, false), c["decoded"].get<std::string>()) << "text: " << text;
    EXPECT_EQ((*tok)->Decode(ids, true), c["decoded_skip_special"].get<std::string>()) << "text: " << text;
    passed += *plain == ids;
  }
  EXPECT_EQ(passed, 45);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufTokenizerRoundTripTest, ::testing::Values("llama3", "qwen3"));

// --- the command line ---

struct CliResult {
  int exit_code;
  std::string out, err;
};

CliResult Doppler(const std::string& args) {
  static int counter = 0;
  const fs::path dir = test::MakeTempDir("convert_cli" + std::to_string(counter++));
  const char* env = std::getenv("DOPPLER_BINARY");
  const std::string cmd = std::string(env != nullptr ? env : DOPPLER_BINARY_PATH) + " " + args + " >" +
                          (dir / "out").string() + " 2>" + (dir / "err").string() + " </dev/null";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, test::ReadFileBytes(dir / "out"), test::ReadFileBytes(dir / "err")};
}

int Lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

TEST(ConvertCli, ConvertsAndTheResultRuns) {
  const fs::path out = test::MakeTempDir("convert_cli_run") / "llama_q.gguf";
  const std::string model = (Fixtures() / "hf" / "llama_q").string();
  CliResult c = Doppler("convert --model " + model + " --out " + out.string() + " --quant q8_0");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.err.find("output.weight (q8_0)"), std::string::npos) << c.err;  // progress, one line per tensor
  EXPECT_NE(c.err.find("wrote " + out.string()), std::string::npos) << c.err;
  absl::StatusOr<test::HfReference> ref = test::LoadHfReference("llama_q");
  ASSERT_TRUE(ref.ok());
  CliResult r = Doppler("run --model " + out.string() + " --prompt-ids " + absl::StrJoin(ref->input_ids, ",") +
                        " -n 16 --temp 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, absl::StrJoin(ref->greedy_tokens, " ") + "\n");
}

TEST(ConvertCli, BadArgumentsAreOneLineErrors) {
  const std::string model = (Fixtures() / "hf" / "llama_q").string();
  const fs::path x = test::MakeTempDir("convert_bad") / "x.gguf";
  // A malformed command line (here a missing --out) exits with 2, every other error with 1.
  for (const auto& [args, code] : std::vector<std::pair<std::string, int>>{
           {"convert --model " + model + " --out " + x.string() + " --quant q3_k", 1},
           {"convert --model " + model, 2},
           {"convert --model /nonexistent --out " + x.string(), 1},
           {"convert --model " + (Fixtures() / "hf" / "gemma3").string() + " --out " + x.string(), 1}}) {
    CliResult r = Doppler(args);
    EXPECT_EQ(r.exit_code, code) << args;
    EXPECT_EQ(Lines(r.err), 1) << args << ": " << r.err;
    EXPECT_NE(r.err.find("doppler convert: error:"), std::string::npos) << r.err;
  }
}

// A damaged GGUF given to `doppler run`: one line naming the file, exit code 1, no crash.
TEST(ConvertCli, DamagedGgufIsAOneLineError) {
  const fs::path dir = test::MakeTempDir("bad_gguf");
  const fs::path good = Fixtures() / "gguf" / "llama_q-Q4_K_M.gguf";
  const std::string bytes = test::ReadFileBytes(good);
  struct Damage {
    std::string name;
    std::string content;
  };
  std::vector<Damage> damages;
  damages.push_back({"truncated_data.gguf", bytes.substr(0, bytes.size() / 2)});
  damages.push_back({"truncated_header.gguf", bytes.substr(0, 1000)});
  damages.push_back({"empty.gguf", ""});
  std::string magic = bytes;
  magic[0] = 'X';
  damages.push_back({"bad_magic.gguf", magic});
  std::string count = bytes;
  count[8] = '\xff';  // tensor count
  count[12] = '\x7f';
  damages.push_back({"bad_tensor_count.gguf", count});
  std::string version = bytes;
  version[4] = 9;
  damages.push_back({"bad_version.gguf", version});
  for (const Damage& d : damages) {
    const fs::path path = dir / d.name;
    std::ofstream(path, std::ios::binary) << d.content;
    CliResult r = Doppler("run --model " + path.string() + " --prompt-ids 1,2,3 -n 2 --temp 0");
    EXPECT_EQ(r.exit_code, 1) << d.name << ": " << r.err;
    EXPECT_EQ(Lines(r.err), 1) << d.name << ": " << r.err;
    EXPECT_NE(r.err.find(path.string()), std::string::npos) << d.name << ": " << r.err;
  }
  CliResult q = Doppler("run --model " + good.string() + " --quant q8_0 --prompt-ids 1,2 -n 2");
  EXPECT_EQ(q.exit_code, 1);
  EXPECT_EQ(Lines(q.err), 1) << q.err;
  EXPECT_NE(q.err.find("GGUF"), std::string::npos) << q.err;
}

}  // namespace
}  // namespace doppler
