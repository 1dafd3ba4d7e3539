// GGUF files as models, on the GPU: llama.cpp's Q8_0 and Q4_K_M files of hf/llama_q run with their
// quantized blocks read by the kernels (f32 activations, f32 KV cache) and must match transformers
// running the same dequantized weights (gguf/*/hf_dequant_*) to the fixture tolerance; the same HF
// model quantized at load (--quant) must too, since the quantizer is ggml's, byte for byte.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "formats/gguf/gguf_file.h"
#include "nlohmann/json.hpp"
#include "runtime/engine.h"
#include "tests/support/engine_env.h"
#include "tests/support/fixtures.h"
#include "tests/support/npy.h"
#include "tests/support/reference.h"
#include "tests/support/reference_logits.h"
#include "tokenizers/gguf_tokenizer.h"

namespace doppler {
namespace {

namespace fs = std::filesystem;

struct GgufReference {
  std::vector<int32_t> input_ids, greedy_tokens;
  int32_t next_token_after_greedy = -1;
  test::NpyArray prefill, decode;                    // hf_dequant_*
  test::NpyArray llamacpp_prefill, llamacpp_decode;  // llamacpp_*
};

absl::StatusOr<GgufReference> LoadGgufReference(const std::string& type) {
  const fs::path dir = test::FixturesDir() / "gguf";
  std::ifstream in(dir / "gguf_refs.json");
  if (!in) return absl::NotFoundError("cannot open gguf_refs.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  GgufReference r;
  r.input_ids = j["input_ids"].get<std::vector<int32_t>>();
  const nlohmann::json& h = j["types"][type]["hf_dequant"];
  r.greedy_tokens = h["greedy_tokens"].get<std::vector<int32_t>>();
  r.next_token_after_greedy = h["next_token_after_greedy"].get<int32_t>();
  for (auto [file, out] : {std::pair{"hf_dequant_prefill_logits.npy", &r.prefill},
                           std::pair{"hf_dequant_decode_logits.npy", &r.decode},
                           std::pair{"llamacpp_prefill_logits.npy", &r.llamacpp_prefill},
                           std::pair{"llamacpp_decode_logits.npy", &r.llamacpp_decode}}) {
    absl::StatusOr<test::NpyArray> a = test::ReadNpy(dir / type / file);
    if (!a.ok()) return a.status();
    *out = *std::move(a);
  }
  return r;
}

// max |a - b| and rms(a - b) over all values.
std::pair<double, double> AbsErrors(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, sum2 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(static_cast<double>(a[i]) - b[i]);
    worst = std::max(worst, d);
    sum2 += d * d;
  }
  return {worst, std::sqrt(sum2 / static_cast<double>(a.size()))};
}

struct Case {
  std::string type;        // "Q8_0" or "Q4_K_M"
  std::string model;       // "gguf" (the fixture file) or "hf" (hf/llama_q quantized at load)
  int64_t prefill_chunk;
  // Decode rounds the matmuls' x through q8 blocks as llama.cpp does (--decode-activations q8):
  // its logits are held to the llama.cpp bound, not the exact one.
  bool decode_q8 = false;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& i) {
  return i.param.model + "_" + i.param.type + "_chunk" + std::to_string(i.param.prefill_chunk) +
         (i.param.decode_q8 ? "_decode_q8" : "");
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.model << " " << c.type << " chunk " << c.prefill_chunk << (c.decode_q8 ? " decode q8" : "");
}

class GgufModelTest : public ::testing::TestWithParam<Case> {};

TEST_P(GgufModelTest, LogitsAndGreedyTokensMatchDequantizedReference) {
  const Case& c = GetParam();
  absl::StatusOr<GgufReference> ref = LoadGgufReference(c.type);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const bool from_gguf = c.model == "gguf";
  runtime::EngineOptions o = test::ReferenceEngineOptions(
      from_gguf ? test::FixturesDir() / "gguf" / ("llama_q-" + c.type + ".gguf") : test::FixturesDir() / "hf" / "llama_q",
      c.prefill_chunk);
  if (!from_gguf) {
    o.quant = c.type == "Q8_0" ? quant::QuantScheme::kQ8_0 : quant::QuantScheme::kQ4_K_M;
    o.weight_dtype = graph::DType::kF32;
  }
  o.decode_activations = c.decode_q8 ? runtime::DecodeActivations::kQ8 : runtime::DecodeActivations::kF32;
  absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  runtime::Engine& e = **engine;
  absl::StatusOr<test::ReferenceLogits> run =
      test::CompareWithReference(e, ref->input_ids, ref->greedy_tokens, ref->prefill.data.data(), ref->decode.data.data());
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->decode_top, test::FollowingTokens(ref->greedy_tokens, ref->next_token_after_greedy));
  const double prefill_err = run->prefill_error, decode_err = run->decode_error;
  const auto [cpp_prefill_max, cpp_prefill_rms] = AbsErrors(run->prefill, ref->llamacpp_prefill.data);
  const auto [cpp_decode_max, cpp_decode_rms] = AbsErrors(run->decode, ref->llamacpp_decode.data);
  std::printf("[ %s %s ] vs hf_dequant: prefill %.3g, decode %.3g (of max |logit| per row); vs llama.cpp: "
              "prefill max %.3g rms %.3g, decode max %.3g rms %.3g\n",
              c.model.c_str(), c.type.c_str(), prefill_err, decode_err, cpp_prefill_max, cpp_prefill_rms, cpp_decode_max,
              cpp_decode_rms);
  // The fixture's tolerance for an engine dequantizing exactly and computing in f32 (prefill always;
  // decode unless it rounds x through q8 blocks).
  EXPECT_LE(prefill_err, 1e-4);
  if (!c.decode_q8) {
    EXPECT_LE(decode_err, 1e-4);
  }
  // llama.cpp quantizes activations too: the README's loose bound (rms <= 0.5, max <= 5% of max |logit|).
  double max_logit = 0;
  for (float v : ref->llamacpp_prefill.data) max_logit = std::max(max_logit, std::abs(static_cast<double>(v)));
  EXPECT_LE(cpp_prefill_rms, 0.5);
  EXPECT_LE(cpp_prefill_max, 0.05 * max_logit);
  EXPECT_LE(cpp_decode_rms, 0.5);
  EXPECT_LE(cpp_decode_max, 0.05 * max_logit);
  if (c.decode_q8) {
    // Rounded as llama.cpp rounds, decode lands about as far from the exact logits as llama.cpp's
    // (Q8_0 max 0.84, Q4_K_M 1.30 in the README, of max |logit| 30-60: 2-4%), and not exactly on them.
    EXPECT_LE(decode_err, 0.05);
    EXPECT_GE(decode_err, 1e-4);
  }

  // Greedy generation through the GPU argmax, on a fresh sequence.
  absl::StatusOr<std::vector<int32_t>> generated = test::Generate(e, ref->input_ids, ref->greedy_tokens.size());
  ASSERT_TRUE(generated.ok()) << generated.status();
  EXPECT_EQ(*generated, ref->greedy_tokens);
  // The same tokens as the HF f32 reference of hf/llama_q.
  absl::StatusOr<test::HfReference> hf = test::LoadHfReference("llama_q");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(*generated, hf->greedy_tokens);
  EXPECT_EQ(e.device().validation_messages(), 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufModelTest,
                         ::testing::Values(Case{"Q8_0", "gguf", 32}, Case{"Q4_K_M", "gguf", 32},
                                           Case{"Q4_K_M", "gguf", 7}, Case{"Q8_0", "hf", 32},
                                           Case{"Q4_K_M", "hf", 32}, Case{"Q8_0", "gguf", 32, true},
                                           Case{"Q4_K_M", "gguf", 32, true}),
                         CaseName);

TEST(GgufModelTest, WeightsKeepTheirOwnTypesOnTheGpu) {
  runtime::EngineOptions o;
  o.model_path = test::FixturesDir() / "gguf" / "llama_q-Q4_K_M.gguf";
  o.context = 32;
  o.prefill_chunk = 8;
  o.validation = true;
  absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status();
  // Every matrix kept its file type: the Q6_K ones (output, layer 1's v and down) and Q4_K others.
  std::map<std::string, std::string> want = {{"lm_head.weight", "q6_k"},
                                             {"model.embed_tokens.weight", "q4_k"},
                                             {"model.layers.0.self_attn.v_proj.weight", "q4_k"},
                                             {"model.layers.1.self_attn.v_proj.weight", "q6_k"},
                                             {"model.layers.1.mlp.down_proj.weight", "q6_k"},
                                             {"model.layers.0.mlp.down_proj.weight", "q4_k"},
                                             {"model.norm.weight", "f32"}};
  std::map<std::string, std::string> got;
  for (const graph::Node& n : (*engine)->graph().nodes()) {
    if (n.kind == graph::OpKind::kParam && want.count(n.attrs.Str("name"))) got[n.attrs.Str("name")] = graph::Name(n.type.dtype);
  }
  EXPECT_EQ(got, want);
}

TEST(GgufModelTest, TokenizerFromMetadataEncodesLikeLlama2c) {
  // The fixture GGUFs carry llama2.c's tok512 vocabulary as a SentencePiece ("llama") tokenizer.
  absl::StatusOr<std::unique_ptr<formats::GgufFile>> file =
      formats::GgufFile::Open(test::FixturesDir() / "gguf" / "llama_q-Q8_0.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::unique_ptr<tokenizers::Tokenizer>> gguf = tokenizers::LoadGgufTokenizer(**file);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  absl::StatusOr<std::unique_ptr<tokenizers::Tokenizer>> l2c =
      tokenizers::LoadLlama2cTokenizer(test::FixturesDir() / "stories260K" / "tok512.bin");
  ASSERT_TRUE(l2c.ok()) << l2c.status();
  EXPECT_EQ((*gguf)->vocab_size(), 512);
  EXPECT_EQ((*gguf)->bos_id(), std::optional<int32_t>(1));
  EXPECT_EQ((*gguf)->eos_ids(), std::vector<int32_t>{2});
  for (const std::string text : {"Once upon a time, there was a little girl named Lily.", "", " leading space",
                                 "two  spaces and\nnewlines\n\n", "Unicode: café ☕ 日本", "Tim's dog said \"hi!\""}) {
    for (bool special : {false, true}) {
      absl::StatusOr<std::vector<int32_t>> a = (*gguf)->Encode(text, special);
      absl::StatusOr<std::vector<int32_t>> b = (*l2c)->Encode(text, special);
      ASSERT_TRUE(a.ok() && b.ok()) << text;
      EXPECT_EQ(*a, *b) << "text: " << text;
      if (!special) {
        EXPECT_EQ((*gguf)->Decode(*a, false), text) << "text: " << text;
      }
    }
  }
}

}  // namespace
}  // namespace doppler
