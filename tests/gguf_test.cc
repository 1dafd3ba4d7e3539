// Tests of the GGUF reader: the two llama.cpp fixture files against gguf_refs.json and the HF
// checkpoint they were made from, files written by the test for every value type, and damaged
// files (each must fail with a message saying what is wrong, never crash or over-allocate).
#include "formats/gguf/gguf_file.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "checkpoints/gguf_arch.h"
#include "checkpoints/gguf_config.h"
#include "checkpoints/hf_names.h"
#include "formats/gguf/gguf_writer.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/rope.h"
#include "nlohmann/json.hpp"
#include "quant/float_codec.h"
#include "quant/quant.h"
#include "tests/support/fixtures.h"
#include "tests/support/npy.h"

namespace doppler::formats {
namespace {

namespace fs = std::filesystem;
using graph::DType;
using nlohmann::json;
using ::testing::HasSubstr;

fs::path GgufDir() { return test::FixturesDir() / "gguf"; }
json Refs() { return test::ReadJsonFile(GgufDir() / "gguf_refs.json"); }
const char* const kTypes[] = {"Q8_0", "Q4_K_M"};

fs::path WriteTemp(const std::string& bytes, const std::string& name) {
  static const fs::path dir = test::MakeTempDir("gguf");
  const fs::path p = dir / name;
  std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return p;
}

std::unique_ptr<GgufFile> OpenFixture(const std::string& type) {
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(GgufDir() / ("llama_q-" + type + ".gguf"));
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? *std::move(f) : nullptr;
}

std::vector<float> Dequant(const TensorView& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  std::vector<float> out(n);
  absl::Status st = quant::DequantizeRow(t.dtype, t.data, n, out.data());
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

// ---------------------------------------------------------------------------------------------
// The fixture files.

TEST(GgufTest, TensorsMatchRefs) {
  const json refs = Refs();
  for (const char* type : kTypes) {
    SCOPED_TRACE(type);
    std::unique_ptr<GgufFile> f = OpenFixture(type);
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), 32u);
    const json& want = refs["types"][type]["tensors"];
    ASSERT_EQ(f->Tensors().size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      const GgufTensorInfo& t = f->Tensors()[i];
      EXPECT_EQ(t.name, want[i]["name"].get<std::string>());
      EXPECT_EQ(absl::AsciiStrToUpper(graph::Name(t.dtype)), want[i]["type"].get<std::string>()) << t.name;
      EXPECT_EQ(t.dims, want[i]["ne"].get<std::vector<int64_t>>()) << t.name;
      EXPECT_EQ(t.nbytes, want[i]["n_bytes"].get<size_t>()) << t.name;
      EXPECT_EQ(t.offset, want[i]["data_offset"].get<uint64_t>()) << t.name;
      // Through the WeightStore interface: outermost-first shape, data at that offset.
      absl::StatusOr<TensorView> v = f->Get(t.name);
      ASSERT_TRUE(v.ok()) << v.status();
      EXPECT_EQ(v->shape, std::vector<int64_t>(t.dims.rbegin(), t.dims.rend()));
      EXPECT_EQ(v->nbytes, t.nbytes);
      EXPECT_EQ(v->dtype, t.dtype);
    }
    EXPECT_EQ(f->Names().size(), want.size());
    EXPECT_FALSE(f->Has("nope"));
    EXPECT_EQ(f->Get("nope").status().code(), absl::StatusCode::kNotFound);
  }
}

TEST(GgufTest, MetadataMatchesRefs) {
  const json refs = Refs();
  for (const char* type : kTypes) {
    SCOPED_TRACE(type);
    std::unique_ptr<GgufFile> f = OpenFixture(type);
    ASSERT_NE(f, nullptr);
    const json& md = refs["types"][type]["metadata"];
    EXPECT_EQ(f->Keys().size(), md.size() + 3);  // + the three 512-entry token arrays
    for (const auto& [key, value] : md.items()) {
      SCOPED_TRACE(key);
      if (value.is_string()) {
        EXPECT_EQ(f->GetString(key).value_or("?"), value.get<std::string>());
      } else if (value.is_boolean()) {
        absl::StatusOr<bool> b = f->GetBool(key);
        ASSERT_TRUE(b.ok()) << b.status();
        EXPECT_EQ(*b, value.get<bool>());
      } else if (value.is_number_integer()) {
        EXPECT_EQ(f->GetInt(key).value_or(-1), value.get<int64_t>());
      } else {
        EXPECT_EQ(f->GetFloat(key).value_or(-1), value.get<double>());
      }
    }
    absl::StatusOr<std::vector<std::string>> tokens = f->GetStringArray("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.ok()) << tokens.status();
    ASSERT_EQ(tokens->size(), 512u);
    EXPECT_EQ((*tokens)[0], "<unk>");
    EXPECT_EQ(f->GetArrayLength("tokenizer.ggml.scores").value_or(0), 512u);
    EXPECT_EQ(f->GetFloatArray("tokenizer.ggml.scores").value_or(std::vector<double>()).size(), 512u);
    EXPECT_EQ(f->GetIntArray("tokenizer.ggml.token_type").value_or(std::vector<int64_t>()).size(), 512u);
    // Wrong type and missing key are told apart.
    EXPECT_EQ(f->GetInt("general.name").status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(f->GetInt("general.name").status().message()), HasSubstr("'general.name' holds string"));
    EXPECT_EQ(f->GetString("no.such.key").status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(f->GetIntArray("tokenizer.ggml.tokens").status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(GgufTest, ConfigEqualsHfConfig) {
  absl::StatusOr<ModelConfig> hf = ReadHfConfig(test::FixturesDir() / "hf/llama_q/config.json");
  ASSERT_TRUE(hf.ok()) << hf.status();
  for (const char* type : kTypes) {
    SCOPED_TRACE(type);
    std::unique_ptr<GgufFile> f = OpenFixture(type);
    ASSERT_NE(f, nullptr);
    absl::StatusOr<ModelConfig> c = checkpoints::ConfigFromGguf(*f);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->architecture, hf->architecture);
    EXPECT_EQ(c->model_type, hf->model_type);
    EXPECT_EQ(c->vocab_size, hf->vocab_size);
    EXPECT_EQ(c->hidden_size, hf->hidden_size);
    EXPECT_EQ(c->intermediate_size, hf->intermediate_size);
    EXPECT_EQ(c->num_layers, hf->num_layers);
    EXPECT_EQ(c->num_heads, hf->num_heads);
    EXPECT_EQ(c->num_kv_heads, hf->num_kv_heads);
    EXPECT_EQ(c->head_dim, hf->head_dim);
    EXPECT_EQ(c->rms_norm_eps, hf->rms_norm_eps);
    EXPECT_EQ(c->tie_word_embeddings, hf->tie_word_embeddings);
    EXPECT_EQ(c->max_position_embeddings, hf->max_position_embeddings);
    EXPECT_EQ(c->hidden_act, hf->hidden_act);
    EXPECT_EQ(c->attention_bias, hf->attention_bias);
    EXPECT_EQ(c->bos_token_id, hf->bos_token_id);
    EXPECT_EQ(c->eos_token_ids, hf->eos_token_ids);
    EXPECT_EQ(c->rope.theta, hf->rope.theta);
    EXPECT_EQ(c->rope.scaling.type, "llama3");
    EXPECT_EQ(c->rope.scaling.factor, hf->rope.scaling.factor);
    EXPECT_EQ(c->rope.scaling.low_freq_factor, hf->rope.scaling.low_freq_factor);
    EXPECT_EQ(c->rope.scaling.high_freq_factor, hf->rope.scaling.high_freq_factor);
    EXPECT_EQ(c->rope.scaling.original_max_position_embeddings, hf->rope.scaling.original_max_position_embeddings);
    EXPECT_EQ(models::ComputeRope(c->rope, c->head_dim, 0).inv_freq, models::ComputeRope(hf->rope, hf->head_dim, 0).inv_freq);
  }
}

TEST(GgufTest, NameMapping) {
  const std::pair<const char*, const char*> pairs[] = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},
      {"blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight"},
      {"blk.12.attn_k.bias", "model.layers.12.self_attn.k_proj.bias"},
      {"blk.1.attn_v.weight", "model.layers.1.self_attn.v_proj.weight"},
      {"blk.1.attn_output.weight", "model.layers.1.self_attn.o_proj.weight"},
      {"blk.1.attn_norm.weight", "model.layers.1.input_layernorm.weight"},
      {"blk.1.attn_q_norm.weight", "model.layers.1.self_attn.q_norm.weight"},
      {"blk.1.ffn_gate.weight", "model.layers.1.mlp.gate_proj.weight"},
      {"blk.1.ffn_up.weight", "model.layers.1.mlp.up_proj.weight"},
      {"blk.1.ffn_down.weight", "model.layers.1.mlp.down_proj.weight"},
      {"blk.1.ffn_norm.weight", "model.layers.1.post_attention_layernorm.weight"},
  };
  const checkpoints::GgufArch& llama = *checkpoints::FindGgufArch("llama");
  for (auto [gguf, hf] : pairs) {
    EXPECT_EQ(checkpoints::HfNameFromGguf(llama, gguf).value_or("?"), hf);
    EXPECT_EQ(checkpoints::GgufNameFromHf(llama, hf).value_or("?"), gguf);
  }
  for (const char* bad : {"rope_freqs.weight", "blk.01.attn_q.weight", "blk.x.attn_q.weight", "blk.0.attn_q",
                          "blk..attn_q.weight", "blk.0.attn_qq.weight", ".weight", ""}) {
    EXPECT_FALSE(checkpoints::HfNameFromGguf(llama, bad).has_value()) << bad;
  }
  EXPECT_FALSE(checkpoints::GgufNameFromHf(llama, "model.layers.0.self_attn.rotary_emb.inv_freq").has_value());
}

// Families whose tensors llama.cpp names otherwise: Gemma 3's sandwich norms, Phi-3's fused
// projections (as llama.cpp's tensor table names them).
TEST(GgufNames, FamilySpecificNames) {
  const checkpoints::GgufArch& gemma = *checkpoints::FindGgufArch("gemma3");
  for (auto [gguf, hf] : {std::pair{"blk.2.post_attention_norm.weight", "model.layers.2.post_attention_layernorm.weight"},
                          std::pair{"blk.2.ffn_norm.weight", "model.layers.2.pre_feedforward_layernorm.weight"},
                          std::pair{"blk.2.post_ffw_norm.weight", "model.layers.2.post_feedforward_layernorm.weight"},
                          std::pair{"blk.2.attn_q.weight", "model.layers.2.self_attn.q_proj.weight"}}) {
    EXPECT_EQ(checkpoints::HfNameFromGguf(gemma, gguf).value_or("?"), hf);
    EXPECT_EQ(checkpoints::GgufNameFromHf(gemma, hf).value_or("?"), gguf);
  }
  const checkpoints::GgufArch& phi3 = *checkpoints::FindGgufArch("phi3");
  for (auto [gguf, hf] : {std::pair{"blk.0.attn_qkv.weight", "model.layers.0.self_attn.qkv_proj.weight"},
                          std::pair{"blk.0.ffn_up.weight", "model.layers.0.mlp.gate_up_proj.weight"},
                          std::pair{"blk.0.ffn_norm.weight", "model.layers.0.post_attention_layernorm.weight"}}) {
    EXPECT_EQ(checkpoints::HfNameFromGguf(phi3, gguf).value_or("?"), hf);
    EXPECT_EQ(checkpoints::GgufNameFromHf(phi3, hf).value_or("?"), gguf);
  }
  EXPECT_EQ(checkpoints::FindGgufArch("gpt9"), nullptr);
  EXPECT_EQ(checkpoints::FindGgufArchOfHfClass("Phi3ForCausalLM"), &phi3);
}

// Every tensor, served under its HF name, is llama.cpp's quantization of the HF tensor: it
// decodes to within the format's error of it, and requantizing the HF tensor gives exactly
// its bytes (rows quantize independently, so this also proves the q/k row order is HF's).
TEST(GgufTest, HfNamedTensorsAreQuantizedHfTensors) {
  absl::StatusOr<std::unique_ptr<WeightStore>> hf = OpenSafetensors(test::FixturesDir() / "hf/llama_q");
  ASSERT_TRUE(hf.ok()) << hf.status();
  for (const char* type : kTypes) {
    SCOPED_TRACE(type);
    std::unique_ptr<GgufFile> raw = OpenFixture(type);
    absl::StatusOr<std::unique_ptr<WeightStore>> store = checkpoints::OpenHfNamedGguf(OpenFixture(type));
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_FALSE((*store)->Has("rope_freqs.weight"));
    std::vector<std::string> want = (*hf)->Names();
    EXPECT_EQ((*store)->Names(), want);
    for (const std::string& name : want) {
      SCOPED_TRACE(name);
      absl::StatusOr<TensorView> g = (*store)->Get(name);
      absl::StatusOr<TensorView> h = (*hf)->Get(name);
      ASSERT_TRUE(g.ok() && h.ok()) << g.status() << h.status();
      ASSERT_EQ(g->shape, h->shape);
      absl::StatusOr<std::vector<float>> x = quant::ToFloat32(*h);
      ASSERT_TRUE(x.ok());
      const std::vector<float> y = Dequant(*g);
      const int64_t cols = h->shape.back(), rows = static_cast<int64_t>(x->size()) / cols;
      absl::StatusOr<std::vector<uint8_t>> requant = quant::QuantizeRows(g->dtype, x->data(), rows, cols);
      ASSERT_TRUE(requant.ok());
      EXPECT_TRUE(requant->size() == g->nbytes && std::memcmp(requant->data(), g->data, g->nbytes) == 0);
      double err2 = 0, x2 = 0, raw_err2 = 0;
      const std::vector<float> unmapped = Dequant(*raw->Get(*checkpoints::GgufNameFromHf(*checkpoints::FindGgufArch("llama"), name)));
      for (size_t i = 0; i < x->size(); ++i) {
        err2 += std::pow(double(y[i]) - (*x)[i], 2);
        raw_err2 += std::pow(double(unmapped[i]) - (*x)[i], 2);
        x2 += std::pow(double((*x)[i]), 2);
      }
      const bool permuted = name.find("q_proj") != std::string::npos || name.find("k_proj") != std::string::npos;
      if (permuted) {
        EXPECT_GT(raw_err2, x2) << "the GGUF rows should be in llama.cpp's order";
      }
      if (g->dtype == DType::kF32) {
        EXPECT_EQ(y, *x);
        continue;
      }
      EXPECT_LT(std::sqrt(err2 / x2), g->dtype == DType::kQ4_K ? 0.12 : 0.05);
      if (g->dtype != DType::kQ8_0) continue;
      // Q8_0: |y - x| <= d/2 for the exact d = max|x|/127 of the block, plus the f16 rounding of
      // d times |q| <= 127, i.e. <= (0.5 + 127 * 2^-11) d < 0.6 d.
      for (size_t b = 0; b < x->size(); b += 32) {
        float amax = 0;
        for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs((*x)[i]));
        for (size_t i = b; i < b + 32; ++i) ASSERT_LE(std::fabs(y[i] - (*x)[i]), 0.6f * amax / 127) << i;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Files written by the test, byte by byte.

class Writer {
 public:
  Writer& U8(uint8_t v) { return Raw(&v, 1); }
  Writer& U16(uint16_t v) { return Le(v, 2); }
  Writer& U32(uint32_t v) { return Le(v, 4); }
  Writer& U64(uint64_t v) { return Le(v, 8); }
  Writer& F32(float v) { return Raw(&v, 4); }
  Writer& F64(double v) { return Raw(&v, 8); }
  Writer& Str(const std::string& s) { return U64(s.size()).Raw(s.data(), s.size()); }
  Writer& Kv(const std::string& key, GgufType t) { return Str(key).U32(static_cast<uint32_t>(t)); }
  Writer& Pad(size_t align) {
    while (bytes.size() % align != 0) bytes.push_back('\0');
    return *this;
  }
  Writer& Raw(const void* p, size_t n) {
    bytes.append(static_cast<const char*>(p), n);
    return *this;
  }
  std::string bytes;

 private:
  Writer& Le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bytes.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
};

// "GGUF", version, counts, then what `body` writes (metadata and tensor infos).
std::string Gguf(uint64_t n_tensors, uint64_t n_kv, const std::function<void(Writer&)>& body, uint32_t version = 3) {
  Writer w;
  w.Raw("GGUF", 4).U32(version).U64(n_tensors).U64(n_kv);
  body(w);
  return w.bytes;
}

absl::StatusOr<std::unique_ptr<GgufFile>> OpenBytes(const std::string& bytes, const std::string& name) {
  return GgufFile::Open(WriteTemp(bytes, name));
}

TEST(GgufTest, EveryValueType) {
  const std::string bytes = Gguf(0, 14, [](Writer& w) {
    w.Kv("u8", GgufType::kU8).U8(200);
    w.Kv("i8", GgufType::kI8).U8(0xfb);  // -5
    w.Kv("u16", GgufType::kU16).U16(65535);
    w.Kv("i16", GgufType::kI16).U16(0x8000);
    w.Kv("u32", GgufType::kU32).U32(4000000000u);
    w.Kv("i32", GgufType::kI32).U32(0xffffffff);
    w.Kv("f32", GgufType::kF32).F32(1.5f);
    w.Kv("bool", GgufType::kBool).U8(1);
    w.Kv("str", GgufType::kString).Str("héllo");
    w.Kv("u64", GgufType::kU64).U64(~0ull);
    w.Kv("i64", GgufType::kI64).U64(static_cast<uint64_t>(-7ll));
    w.Kv("f64", GgufType::kF64).F64(-2.25);
    w.Kv("nested", GgufType::kArray).U32(9).U64(2);  // [[1, 2], []] of i16
    w.U32(3).U64(2).U16(1).U16(2).U32(3).U64(0);
    w.Kv("bools", GgufType::kArray).U32(7).U64(3).U8(1).U8(0).U8(1);
  });
  absl::StatusOr<std::unique_ptr<GgufFile>> f = OpenBytes(bytes, "types.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufFile& g = **f;
  EXPECT_EQ(g.GetInt("u8").value_or(0), 200);
  EXPECT_EQ(g.GetInt("i8").value_or(0), -5);
  EXPECT_EQ(g.GetInt("u16").value_or(0), 65535);
  EXPECT_EQ(g.GetInt("i16").value_or(0), -32768);
  EXPECT_EQ(g.GetInt("u32").value_or(0), 4000000000);
  EXPECT_EQ(g.GetInt("i32").value_or(0), -1);
  EXPECT_EQ(g.GetFloat("f32").value_or(0), 1.5);
  EXPECT_EQ(g.GetBool("bool").value_or(false), true);
  EXPECT_EQ(g.GetString("str").value_or(""), "héllo");
  EXPECT_FALSE(g.GetInt("u64").ok());  // does not fit int64
  EXPECT_EQ(std::get<uint64_t>(g.Find("u64")->value), ~0ull);
  EXPECT_EQ(g.GetInt("i64").value_or(0), -7);
  EXPECT_EQ(g.GetFloat("f64").value_or(0), -2.25);
  EXPECT_EQ(g.GetFloat("u8").value_or(0), 200.0);
  EXPECT_FALSE(g.GetBool("u8").ok());
  absl::StatusOr<std::vector<GgufValue>> nested = g.GetArray("nested");
  ASSERT_TRUE(nested.ok()) << nested.status();
  ASSERT_EQ(nested->size(), 2u);
  const std::vector<GgufValue> inner = g.Elements(std::get<GgufArray>((*nested)[0].value));
  ASSERT_EQ(inner.size(), 2u);
  EXPECT_EQ(std::get<int64_t>(inner[1].value), 2);
  EXPECT_EQ(std::get<GgufArray>((*nested)[1].value).count, 0u);
  EXPECT_FALSE(g.GetIntArray("nested").ok());
  EXPECT_EQ(g.GetArray("bools")->size(), 3u);
  EXPECT_EQ(g.Keys().front(), "u8");
  EXPECT_TRUE(g.Names().empty());
}

// One F32 [2, 3] tensor (GGUF dims {3, 2}) at an alignment of 64, in a version-2 file.
TEST(GgufTest, AlignmentAndVersion2) {
  std::string bytes = Gguf(1, 1, [](Writer& w) {
    w.Kv("general.alignment", GgufType::kU32).U32(64);
    w.Str("t").U32(2).U64(3).U64(2).U32(0).U64(64);
    w.Pad(64).Raw(std::string(64, '\0').data(), 64);
    for (int i = 0; i < 6; ++i) w.F32(static_cast<float>(i));
  }, 2);
  absl::StatusOr<std::unique_ptr<GgufFile>> f = OpenBytes(bytes, "aligned.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->version(), 2u);
  EXPECT_EQ((*f)->alignment(), 64u);
  absl::StatusOr<TensorView> t = (*f)->Get("t");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Dequant(*t), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ((*f)->Tensors()[0].offset % 64, 0u);
}

// ---------------------------------------------------------------------------------------------
// Damaged files.

void ExpectBad(const std::string& bytes, const std::string& name, const std::string& expected) {
  absl::StatusOr<std::unique_ptr<GgufFile>> f = OpenBytes(bytes, name);
  ASSERT_FALSE(f.ok()) << name << " opened";
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
  EXPECT_THAT(std::string(f.status().message()), HasSubstr(name)) << "the message names the file";
  EXPECT_THAT(std::string(f.status().message()), HasSubstr(expected));
}

TEST(GgufTest, SyntheticBadFiles) {
  auto tensor_file = [](uint32_t type, uint64_t ne0, uint64_t offset, size_t data_bytes) {
    return Gguf(1, 0, [&](Writer& w) {
      w.Str("t").U32(1).U64(ne0).U32(type).U64(offset);
      w.Pad(32).Raw(std::string(data_bytes, '\0').data(), data_bytes);
    });
  };
  ExpectBad("", "empty.gguf", "too short");
  ExpectBad("GGML\3\0\0\0", "magic.gguf", "not a GGUF file");
  ExpectBad(Gguf(0, 0, [](Writer&) {}, 1), "v1.gguf", "version 1 is not supported");
  ExpectBad(Gguf(0, 0, [](Writer&) {}, 0x03000000), "big_endian.gguf", "big-endian");
  ExpectBad(Gguf(0, 1, [](Writer& w) { w.Kv("k", GgufType::kBool).U8(2); }), "bool.gguf", "not 0 or 1");
  ExpectBad(Gguf(0, 1, [](Writer& w) { w.Kv("k", static_cast<GgufType>(13)).U8(2); }), "vtype.gguf", "unknown type 13");
  ExpectBad(Gguf(0, 1, [](Writer& w) { w.Kv("", GgufType::kU8).U8(2); }), "emptykey.gguf", "empty key");
  ExpectBad(Gguf(0, 2, [](Writer& w) { w.Kv("k", GgufType::kU8).U8(2).Kv("k", GgufType::kU8).U8(3); }), "dupkey.gguf",
            "appears twice");
  ExpectBad(Gguf(0, 1, [](Writer& w) { w.Kv("general.alignment", GgufType::kU32).U32(48); }), "align48.gguf",
            "not a power of two");
  ExpectBad(Gguf(0, 1, [](Writer& w) { w.Kv("general.alignment", GgufType::kString).Str("32"); }), "alignstr.gguf",
            "general.alignment holds string, not an unsigned integer");
  ExpectBad(Gguf(0, 1, [](Writer& w) { w.Kv("a", GgufType::kArray).U32(99).U64(0); }), "arrtype.gguf",
            "unknown element type 99");
  ExpectBad(Gguf(0, 1,
                 [](Writer& w) {
                   w.Kv("deep", GgufType::kArray);
                   for (int i = 0; i < 20; ++i) w.U32(9).U64(1);
                   w.U32(0).U64(0);
                 }),
            "deep.gguf", "nests arrays more than 8 deep");
  ExpectBad(tensor_file(8, 16, 0, 64), "q8_row.gguf", "not a multiple of its block size 32");
  ExpectBad(tensor_file(99, 4, 0, 64), "ttype.gguf", "unknown type (99)");
  ExpectBad(tensor_file(9, 32, 0, 64), "q8_1.gguf", "type Q8_1 (9), which doppler cannot load");
  ExpectBad(tensor_file(0, 4, 16, 64), "misaligned.gguf", "not a multiple of the alignment 32");
  ExpectBad(tensor_file(0, 4, 0, 15), "short_data.gguf", "runs past the end of the file");
  ExpectBad(tensor_file(0, 4, ~0ull - 31, 16), "wrap.gguf", "runs past the end of the file");
  ExpectBad(tensor_file(0, 1ull << 62, 0, 16), "huge.gguf", "overflows");
  ExpectBad(Gguf(2, 0,
                 [](Writer& w) {
                   w.Str("a").U32(1).U64(8).U32(0).U64(0);
                   w.Str("b").U32(1).U64(8).U32(0).U64(0);
                   w.Pad(32).Raw(std::string(64, '\0').data(), 64);
                 }),
            "overlap.gguf", "overlap");
  ExpectBad(Gguf(2, 0,
                 [](Writer& w) {
                   w.Str("a").U32(1).U64(8).U32(0).U64(0);
                   w.Str("a").U32(1).U64(8).U32(0).U64(32);
                   w.Pad(32).Raw(std::string(64, '\0').data(), 64);
                 }),
            "duptensor.gguf", "appears twice");
  ExpectBad(Gguf(1, 0, [](Writer& w) { w.Str("t").U32(5).U64(1).U64(1).U64(1).U64(1).U64(1).U32(0).U64(0).Pad(32).U32(0); }),
            "5d.gguf", "5 dimensions");
  ExpectBad(Gguf(1, 0, [](Writer& w) { w.Str("t").U32(2).U64(4).U64(0).U32(0).U64(0).Pad(32); }), "zerodim.gguf",
            "dimension 1 (0) is zero");
}

// Positions of the fields of a fixture file, found by the test's own walk of the format.
struct Layout {
  size_t data_start = 0;
  std::map<std::string, size_t> kv_key_len, kv_type, kv_value;  // by key
  std::vector<size_t> t_ndims, t_dims, t_type, t_offset;         // by tensor index
};

Layout Walk(const std::string& b) {
  auto u32 = [&](size_t p) { uint32_t v; std::memcpy(&v, b.data() + p, 4); return v; };
  auto u64 = [&](size_t p) { uint64_t v; std::memcpy(&v, b.data() + p, 8); return v; };
  Layout l;
  size_t p = 24;
  std::function<size_t(uint32_t, size_t)> skip = [&](uint32_t t, size_t q) -> size_t {
    static const int kSize[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (t == 8) return q + 8 + u64(q);
    if (t != 9) return q + kSize[t];
    const uint32_t et = u32(q);
    const uint64_t n = u64(q + 4);
    q += 12;
    for (uint64_t i = 0; i < n; ++i) q = skip(et, q);
    return q;
  };
  for (uint64_t i = 0; i < u64(16); ++i) {
    const std::string key = b.substr(p + 8, u64(p));
    l.kv_key_len[key] = p;
    p += 8 + key.size();
    l.kv_type[key] = p;
    l.kv_value[key] = p + 4;
    p = skip(u32(p), p + 4);
  }
  for (uint64_t i = 0; i < u64(8); ++i) {
    p += 8 + u64(p);
    l.t_ndims.push_back(p);
    l.t_dims.push_back(p + 4);
    p += 4 + 8 * u32(p);
    l.t_type.push_back(p);
    l.t_offset.push_back(p + 4);
    p += 12;
  }
  l.data_start = (p + 31) / 32 * 32;
  return l;
}

std::string Patch64(std::string b, size_t at, uint64_t v) {
  std::memcpy(b.data() + at, &v, 8);
  return b;
}
std::string Patch32(std::string b, size_t at, uint32_t v) {
  std::memcpy(b.data() + at, &v, 4);
  return b;
}

TEST(GgufTest, DamagedFixtureFiles) {
  const std::string good = test::ReadFileBytes(GgufDir() / "llama_q-Q8_0.gguf");
  const Layout l = Walk(good);
  ASSERT_EQ(l.data_start, 12832u);  // the first tensor's offset in gguf_refs.json
  ASSERT_EQ(l.t_type.size(), 22u);

  // Truncated at every 1/64 of the header region, then through the data section.
  for (int k = 0; k < 64; ++k) {
    const size_t at = l.data_start * k / 64;
    ExpectBad(good.substr(0, at), "trunc_hdr_" + std::to_string(k) + ".gguf", "");
  }
  for (int k = 0; k < 32; ++k) {
    const size_t at = l.data_start + (good.size() - l.data_start) * k / 32;
    ExpectBad(good.substr(0, at), "trunc_data_" + std::to_string(k) + ".gguf", "file truncated?");
  }
  ExpectBad(good.substr(0, good.size() - 1), "trunc_last.gguf", "file truncated?");

  ExpectBad(Patch64(good, 8, 1ull << 62), "tcount.gguf", "tensor count 4611686018427387904 cannot fit");
  ExpectBad(Patch64(good, 8, ~0ull), "tcount_max.gguf", "cannot fit");
  ExpectBad(Patch64(good, 8, 23), "tcount23.gguf", "");
  ExpectBad(Patch64(good, 16, 1ull << 40), "kvcount.gguf", "metadata count 1099511627776 cannot fit");
  ExpectBad(Patch64(good, 16, 25), "kvcount25.gguf", "");
  ExpectBad(Patch64(good, l.kv_key_len.at("general.name"), good.size()), "keylen.gguf", "only");
  ExpectBad(Patch64(good, l.kv_key_len.at("general.name"), ~0ull), "keylen_max.gguf", "claims 18446744073709551615 bytes");
  ExpectBad(Patch64(good, l.kv_value.at("general.name"), 1ull << 50), "strlen.gguf", "claims 1125899906842624 bytes");
  const size_t tokens = l.kv_value.at("tokenizer.ggml.tokens");
  ExpectBad(Patch64(good, tokens + 4, 1ull << 40), "arrcount.gguf", "claims 1099511627776 elements of type string");
  ExpectBad(Patch64(good, tokens + 12, 1ull << 33), "tokenlen.gguf", "an element of metadata 'tokenizer.ggml.tokens'");
  ExpectBad(Patch32(good, l.kv_type.at("llama.block_count"), 77), "kvtype.gguf", "unknown type 77");
  std::string bool5 = good;
  bool5[l.kv_value.at("tokenizer.ggml.add_bos_token")] = 5;
  ExpectBad(bool5, "bool5.gguf", "not 0 or 1");
  ExpectBad(Patch32(good, l.t_type[0], 1234), "ttype.gguf", "'output.weight' has unknown type (1234)");
  ExpectBad(Patch32(good, l.t_ndims[0], 9), "ndims.gguf", "has 9 dimensions");
  ExpectBad(Patch64(good, l.t_dims[0], 0), "dim0.gguf", "is zero");
  ExpectBad(Patch64(good, l.t_dims[0] + 8, 1ull << 40), "dimbig.gguf", "runs past the end");
  ExpectBad(Patch64(good, l.t_offset[1], 152096 - 12832 + 4), "misaligned.gguf", "not a multiple of the alignment 32");
  ExpectBad(Patch64(good, l.t_offset[1], 1ull << 40), "offset.gguf", "runs past the end");
  ExpectBad(Patch64(good, l.t_offset[1], 0), "overlap.gguf", "overlap");

  // Single-bit flips spread over the header either still parse or fail cleanly (run under
  // ASan/UBSan to make "cleanly" mean something; the fuzzer covers the rest).
  for (size_t byte = 0; byte < l.data_start; byte += 37) {
    std::string b = good;
    b[byte] = static_cast<char>(b[byte] ^ (1 << (byte % 8)));
    absl::StatusOr<std::unique_ptr<GgufFile>> f = OpenBytes(b, "flip.gguf");
    if (f.ok()) (void)checkpoints::ConfigFromGguf(**f);
  }
}

TEST(GgufTest, ConfigErrors) {
  auto config_of = [](const std::string& arch, const std::string& name) {
    const std::string bytes = Gguf(0, 1, [&](Writer& w) { w.Kv("general.architecture", GgufType::kString).Str(arch); });
    absl::StatusOr<std::unique_ptr<GgufFile>> f = OpenBytes(bytes, name);
    EXPECT_TRUE(f.ok()) << f.status();
    return checkpoints::ConfigFromGguf(**f).status();
  };
  absl::Status st = config_of("mamba", "mamba.gguf");
  EXPECT_THAT(std::string(st.message()), HasSubstr("architecture 'mamba' is not supported (supported: llama, qwen2, qwen3, gemma3, phi3, qwen3moe, gpt-oss)"));
  st = config_of("llama", "nokeys.gguf");
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(st.message()), HasSubstr("'llama.block_count' is missing"));
  EXPECT_FALSE(checkpoints::OpenHfNamedGguf(*OpenBytes(Gguf(0, 0, [](Writer&) {}), "noarch.gguf")).ok());
}

// A mixture of experts' metadata against itself and against its tensors (gguf/lcpp/mixtral, edited
// in place; a qwen3moe file written here): each inconsistency is one error naming the GGUF key or
// tensor and what it should be.
TEST(GgufTest, ExpertErrors) {
  const std::string good = test::ReadFileBytes(GgufDir() / "lcpp" / "mixtral-lcpp-f32.gguf");
  const Layout l = Walk(good);
  auto config_of = [](const std::string& bytes, const std::string& name) {
    absl::StatusOr<std::unique_ptr<GgufFile>> f = OpenBytes(bytes, name);
    EXPECT_TRUE(f.ok()) << f.status();
    return f.ok() ? checkpoints::ConfigFromGguf(**f) : absl::StatusOr<ModelConfig>(f.status());
  };
  auto error_of = [&](const std::string& bytes, const std::string& name) {
    absl::StatusOr<ModelConfig> c = config_of(bytes, name);
    EXPECT_FALSE(c.ok()) << name;
    return std::string(c.status().message());
  };
  absl::StatusOr<ModelConfig> mixtral = config_of(good, "mixtral.gguf");
  ASSERT_TRUE(mixtral.ok()) << mixtral.status();
  EXPECT_EQ(mixtral->architecture, "MixtralForCausalLM");

  const size_t used = l.kv_value.at("llama.expert_used_count"), count = l.kv_value.at("llama.expert_count");
  EXPECT_THAT(error_of(Patch32(good, used, 5), "used5.gguf"),
              HasSubstr("llama.expert_used_count is 5: it must be between 1 and llama.expert_count (4)"));
  EXPECT_THAT(error_of(Patch32(good, used, 0), "used0.gguf"),
              HasSubstr("llama.expert_used_count is 0: it must be between 1 and llama.expert_count (4)"));
  EXPECT_THAT(error_of(Patch32(good, count, 0), "count0.gguf"), HasSubstr("llama.expert_used_count is 2 but llama.expert_count is 0"));
  EXPECT_THAT(error_of(Patch32(Patch32(good, count, 0), used, 0), "count0used0.gguf"),
              HasSubstr("tensor blk.0.ffn_gate_exps.weight belongs to a mixture of experts, but llama.expert_count is 0"));

  // Tensors, by their place in the file.
  absl::StatusOr<std::unique_ptr<GgufFile>> file = OpenBytes(good, "mixtral.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  auto index_of = [&](const std::string& name) {
    const std::vector<GgufTensorInfo>& t = (*file)->Tensors();
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i].name == name) return i;
    }
    ADD_FAILURE() << name;
    return size_t{0};
  };
  std::string renamed = good;
  const size_t name_at = l.t_ndims[index_of("blk.1.ffn_up_exps.weight")] - std::string("blk.1.ffn_up_exps.weight").size();
  renamed[name_at + std::string("blk.1.ffn_up_exp").size()] = 'z';  // blk.1.ffn_up_expz.weight
  EXPECT_THAT(error_of(renamed, "missing.gguf"),
              HasSubstr("tensor blk.1.ffn_up_exps.weight is missing: llama.expert_count is 4, so every layer has a router "
                        "(ffn_gate_inp) and stacked experts (ffn_gate_exps, ffn_up_exps, ffn_down_exps)"));
  // [128, 96, 4] in ggml's order (innermost first) made [128, 48, 8]: the same bytes, 8 experts of 48.
  const size_t dims = l.t_dims[index_of("blk.0.ffn_gate_exps.weight")];
  EXPECT_THAT(error_of(Patch64(Patch64(good, dims + 8, 48), dims + 16, 8), "shape.gguf"),
              HasSubstr("tensor blk.0.ffn_gate_exps.weight is [8, 48, 128] but the metadata gives [4, 96, 128] "
                        "(llama.expert_count x llama.feed_forward_length x llama.embedding_length)"));
  const size_t router = l.t_dims[index_of("blk.1.ffn_gate_inp.weight")];
  EXPECT_THAT(error_of(Patch64(Patch64(good, router, 64), router + 8, 8), "router.gguf"),
              HasSubstr("tensor blk.1.ffn_gate_inp.weight is [8, 64] but the metadata gives [4, 128] "
                        "(llama.expert_count x llama.embedding_length)"));

  // qwen3moe is always a mixture of experts.
  const fs::path dir = test::MakeTempDir("gguf_experts");
  auto qwen3moe = [&](const std::string& file, const std::function<void(GgufWriter&)>& extra) {
    GgufWriter w;
    w.AddString("general.architecture", "qwen3moe");
    for (auto [key, v] : {std::pair{"block_count", 2u}, std::pair{"embedding_length", 64u}, std::pair{"feed_forward_length", 96u},
                          std::pair{"attention.head_count", 4u}, std::pair{"vocab_size", 100u}}) {
      w.AddU32(std::string("qwen3moe.") + key, v);
    }
    w.AddF32("qwen3moe.attention.layer_norm_rms_epsilon", 1e-6f);
    extra(w);
    EXPECT_TRUE(w.Write(dir / file).ok());
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(dir / file);
    EXPECT_TRUE(f.ok()) << f.status();
    absl::StatusOr<ModelConfig> c = checkpoints::ConfigFromGguf(**f);
    EXPECT_FALSE(c.ok()) << file;
    return std::string(c.status().message());
  };
  EXPECT_THAT(qwen3moe("none.gguf", [](GgufWriter&) {}),
              HasSubstr("qwen3moe.expert_count is missing: a qwen3moe model is a mixture of experts"));
  EXPECT_THAT(qwen3moe("zero.gguf", [](GgufWriter& w) { w.AddU32("qwen3moe.expert_count", 0); }),
              HasSubstr("qwen3moe.expert_count is 0: a qwen3moe model is a mixture of experts"));
  EXPECT_THAT(qwen3moe("noused.gguf", [](GgufWriter& w) { w.AddU32("qwen3moe.expert_count", 8); }),
              HasSubstr("qwen3moe.expert_used_count is missing (qwen3moe.expert_count is 8)"));
  // Keys right, no tensors: the first layer's router is missing.
  EXPECT_THAT(qwen3moe("notensors.gguf",
                       [](GgufWriter& w) {
                         w.AddU32("qwen3moe.expert_count", 8);
                         w.AddU32("qwen3moe.expert_used_count", 2);
                         w.AddU32("qwen3moe.expert_feed_forward_length", 32);
                         ASSERT_TRUE(w.AddTensor("blk.0.attn_norm.weight", DType::kF32, {64}, [] {
                                        return quant::EncodeFloats(DType::kF32, std::vector<float>(64, 1.0f));
                                      }).ok());
                       }),
              HasSubstr("tensor blk.0.ffn_gate_inp.weight is missing: qwen3moe.expert_count is 8"));
}

// MXFP4 tensors (GPT-OSS's experts) are ggml type 39: gguf-py's MXFP4 blocks of quant/types, stored
// under that type, read back as MXFP4 and dequantized bit for bit as gguf-py dequantizes them.
TEST(GgufTest, Mxfp4IsGgmlType39) {
  const fs::path types = test::FixturesDir() / "quant" / "types";
  const std::string blocks = test::ReadFileBytes(types / "mxfp4.bin");
  absl::StatusOr<test::NpyArray> want = test::ReadNpy(types / "mxfp4_dequant_f32.npy");
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_EQ(want->shape.size(), 2u);
  GgufWriter w;
  w.AddString("general.architecture", "gpt-oss");
  ASSERT_TRUE(w.AddTensor("blk.0.ffn_down_exps.weight", DType::kMXFP4, want->shape, [&] {
                 return absl::StatusOr<std::vector<uint8_t>>(std::vector<uint8_t>(blocks.begin(), blocks.end()));
               }).ok());
  const fs::path file = test::MakeTempDir("gguf_mxfp4") / "mxfp4.gguf";
  ASSERT_TRUE(w.Write(file).ok());
  // The tensor info: name, n_dims 2, the dims, then the type.
  const std::string bytes = test::ReadFileBytes(file);
  const size_t at = bytes.find("blk.0.ffn_down_exps.weight") + std::string("blk.0.ffn_down_exps.weight").size() + 4 + 16;
  uint32_t type = 0;
  std::memcpy(&type, bytes.data() + at, 4);
  EXPECT_EQ(type, 39u);
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(file);
  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<TensorView> t = (*f)->Get("blk.0.ffn_down_exps.weight");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dtype, DType::kMXFP4);
  EXPECT_EQ(t->shape, want->shape);
  const std::vector<float> got = Dequant(*t);
  ASSERT_EQ(got.size(), want->data.size());
  EXPECT_EQ(std::memcmp(got.data(), want->data.data(), got.size() * sizeof(float)), 0);
}

// Rope scalings as llama.cpp's metadata states them: YaRN's keys (attn_factor multiplies YaRN's own
// 0.1 ln(factor) + 1), LongRoPE's factor tensors; a bad factor tensor or an unknown type is an error.
TEST(GgufTest, RopeScalingsFromMetadata) {
  const fs::path dir = test::MakeTempDir("gguf_rope");
  auto write = [&](const std::string& file, const std::function<void(GgufWriter&)>& extra) {
    GgufWriter w;
    w.AddString("general.architecture", "qwen3");
    for (auto [key, v] : {std::pair{"block_count", 2u}, std::pair{"embedding_length", 64u},
                          std::pair{"feed_forward_length", 96u}, std::pair{"attention.head_count", 4u},
                          std::pair{"context_length", 512u}, std::pair{"vocab_size", 100u}}) {
      w.AddU32(std::string("qwen3.") + key, v);
    }
    w.AddF32("qwen3.attention.layer_norm_rms_epsilon", 1e-6f);
    w.AddF32("qwen3.rope.freq_base", 10000.0f);
    extra(w);
    EXPECT_TRUE(w.Write(dir / file).ok());
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(dir / file);
    if (!f.ok()) return absl::StatusOr<ModelConfig>(f.status());
    return checkpoints::ConfigFromGguf(**f);
  };
  absl::StatusOr<ModelConfig> yarn = write("yarn.gguf", [](GgufWriter& w) {
    w.AddString("qwen3.rope.scaling.type", "yarn");
    w.AddF32("qwen3.rope.scaling.factor", 4.0f);
    w.AddU32("qwen3.rope.scaling.original_context_length", 128);
    w.AddF32("qwen3.rope.scaling.attn_factor", 2.0f);
    w.AddF32("qwen3.rope.scaling.yarn_beta_fast", 16.0f);
  });
  ASSERT_TRUE(yarn.ok()) << yarn.status();
  EXPECT_EQ(yarn->rope.scaling.type, "yarn");
  EXPECT_EQ(yarn->rope.scaling.factor, 4.0f);
  EXPECT_EQ(yarn->rope.scaling.original_max_position_embeddings, 128);
  EXPECT_EQ(yarn->rope.scaling.beta_fast, 16.0f);
  EXPECT_EQ(yarn->rope.scaling.beta_slow, 1.0f);
  EXPECT_FLOAT_EQ(yarn->rope.scaling.attention_factor, static_cast<float>(2.0 * (0.1 * std::log(4.0) + 1.0)));

  const std::vector<float> long_f = {1, 2, 3, 4, 5, 6, 7, 8}, short_f = {1, 1, 1, 1, 2, 2, 2, 2};
  absl::StatusOr<ModelConfig> longrope = write("longrope.gguf", [&](GgufWriter& w) {
    w.AddU32("qwen3.rope.scaling.original_context_length", 64);
    w.AddF32("qwen3.rope.scaling.attn_factor", 1.25f);
    for (auto [name, v] : {std::pair{"rope_factors_long.weight", &long_f}, std::pair{"rope_factors_short.weight", &short_f}}) {
      const std::vector<float> values = *v;
      ASSERT_TRUE(w.AddTensor(name, graph::DType::kF32, {8}, [values]() { return quant::EncodeFloats(graph::DType::kF32, values); }).ok());
    }
  });
  ASSERT_TRUE(longrope.ok()) << longrope.status();
  EXPECT_EQ(longrope->rope.scaling.type, "longrope");
  EXPECT_EQ(longrope->rope.scaling.long_factor, long_f);
  EXPECT_EQ(longrope->rope.scaling.short_factor, short_f);
  EXPECT_EQ(longrope->rope.scaling.original_max_position_embeddings, 64);
  EXPECT_EQ(longrope->rope.scaling.attention_factor, 1.25f);

  absl::StatusOr<ModelConfig> short_list = write("short.gguf", [&](GgufWriter& w) {
    for (const char* name : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
      const std::vector<float> three = {1, 2, 3};
      ASSERT_TRUE(w.AddTensor(name, graph::DType::kF32, {3}, [three]() { return quant::EncodeFloats(graph::DType::kF32, three); }).ok());
    }
  });
  EXPECT_THAT(std::string(short_list.status().message()),
              HasSubstr("rope_factors_long.weight must be a float vector of 8 values"));
  absl::StatusOr<ModelConfig> unknown = write("su.gguf", [](GgufWriter& w) { w.AddString("qwen3.rope.scaling.type", "su"); });
  EXPECT_THAT(std::string(unknown.status().message()),
              HasSubstr("qwen3.rope.scaling.type 'su' is not supported (none, linear, yarn)"));
}

}  // namespace
}  // namespace doppler::formats
