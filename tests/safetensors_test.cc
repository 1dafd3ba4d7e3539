// Tests of the safetensors reader: every fixture checkpoint, sharded checkpoints, and
// damaged files (each must fail with a message that says what is wrong and where).
#include "formats/safetensors.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "formats/hf_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "quant/float_codec.h"
#include "tests/support/fixtures.h"

namespace doppler::formats {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

void WriteBytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string U64le(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A checkpoint taken apart by the test itself (independently of the reader under test).
struct Raw {
  json header;
  std::string data;  // the data section
};

Raw ReadRaw(const fs::path& p) {
  const std::string bytes = test::ReadFileBytes(p);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  return Raw{json::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
}

std::string Serialize(const json& header, const std::string& data) {
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // the format pads the header with spaces
  return U64le(h.size()) + h + data;
}

const fs::path kStoriesDir() { return test::FixturesDir() / "stories260K/hf"; }

std::vector<fs::path> ModelDirs() {
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(test::FixturesDir() / "hf")) {
    if (fs::exists(e.path() / "model.safetensors")) dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  dirs.push_back(kStoriesDir());
  return dirs;
}

void ExpectShape(const WeightStore& store, const std::string& name, std::vector<int64_t> shape) {
  absl::StatusOr<TensorView> t = store.Get(name);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->shape, shape) << name;
  EXPECT_EQ(t->dtype, graph::DType::kF32) << name;
}

TEST(Safetensors, OpensEveryFixtureCheckpoint) {
  std::vector<fs::path> dirs = ModelDirs();
  ASSERT_GE(dirs.size(), 9u);
  for (const fs::path& dir : dirs) {
    SCOPED_TRACE(dir.string());
    absl::StatusOr<ModelConfig> cfg = ReadHfConfig(dir / "config.json");
    ASSERT_TRUE(cfg.ok()) << cfg.status();
    absl::StatusOr<std::unique_ptr<WeightStore>> store = OpenSafetensors(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    const WeightStore& s = **store;
    EXPECT_EQ(s.Describe(), (dir / "model.safetensors").string());

    // Tensor count and names against the header as the test reads it.
    Raw raw = ReadRaw(dir / "model.safetensors");
    std::set<std::string> expected;
    for (const auto& [name, v] : raw.header.items()) {
      if (name != "__metadata__") expected.insert(name);
    }
    std::vector<std::string> names = s.Names();
    EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), expected);
    EXPECT_EQ(names.size(), expected.size());
    EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));

    const int64_t h = cfg->hidden_size;
    ExpectShape(s, "model.embed_tokens.weight", {cfg->vocab_size, h});
    ExpectShape(s, "model.norm.weight", {h});
    // A dense MLP's down projection (the mixtures of experts hold one per expert instead).
    if (s.Has("model.layers.0.mlp.down_proj.weight")) {
      ExpectShape(s, "model.layers.0.mlp.down_proj.weight", {h, cfg->intermediate_size});
    }
    if (s.Has("model.layers.0.self_attn.q_proj.weight")) {
      ExpectShape(s, "model.layers.0.self_attn.q_proj.weight", {int64_t{cfg->num_heads} * cfg->head_dim, h});
      ExpectShape(s, "model.layers.0.self_attn.k_proj.weight", {int64_t{cfg->num_kv_heads} * cfg->head_dim, h});
    } else {  // phi3 fuses q, k and v
      ExpectShape(s, "model.layers.0.self_attn.qkv_proj.weight",
                  {int64_t{cfg->num_heads + 2 * cfg->num_kv_heads} * cfg->head_dim, h});
    }
    EXPECT_EQ(s.Has("lm_head.weight"), !cfg->tie_word_embeddings);
    std::set<int> layers;
    for (const std::string& n : names) {
      if (n.rfind("model.layers.", 0) == 0) layers.insert(std::stoi(n.substr(13)));
    }
    EXPECT_EQ(static_cast<int>(layers.size()), cfg->num_layers);

    for (const std::string& n : names) {
      absl::StatusOr<TensorView> t = s.Get(n);
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ(t->name, n);
      EXPECT_EQ(t->file, (dir / "model.safetensors").string());
      absl::StatusOr<std::vector<float>> v = quant::ToFloat32(*t);
      ASSERT_TRUE(v.ok()) << v.status();
      for (float x : *v) ASSERT_TRUE(std::isfinite(x)) << n;
      // The view points at exactly the bytes the header describes.
      const auto& offs = raw.header[n]["data_offsets"];
      EXPECT_EQ(std::memcmp(t->data, raw.data.data() + offs[0].get<size_t>(), t->nbytes), 0) << n;
    }
  }
}

TEST(Safetensors, MissingTensorAndMissingDirectory) {
  absl::StatusOr<std::unique_ptr<WeightStore>> store = OpenSafetensors(kStoriesDir());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_FALSE((*store)->Has("model.layers.99.mlp.up_proj.weight"));
  absl::Status st = (*store)->Get("model.layers.99.mlp.up_proj.weight").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(st.message()), HasSubstr("model.layers.99.mlp.up_proj.weight"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("model.safetensors"));

  const fs::path empty = test::MakeTempDir("st_empty");
  st = OpenSafetensors(empty).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(st.message()), HasSubstr(empty.string()));
  st = OpenSafetensors(empty / "nope").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  fs::remove_all(empty);
}

// Damaged copies of stories260K's model.safetensors.
class SafetensorsDamage : public ::testing::Test {
 protected:
  void SetUp() override {
    original_ = test::ReadFileBytes(kStoriesDir() / "model.safetensors");
    raw_ = ReadRaw(kStoriesDir() / "model.safetensors");
    dir_ = test::MakeTempDir("st_damage");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `bytes` as dir/model.safetensors and opens the directory.
  absl::Status OpenBytes(const std::string& bytes) {
    WriteBytes(dir_ / "model.safetensors", bytes);
    return OpenSafetensors(dir_).status();
  }
  absl::Status OpenHeader(const json& header) { return OpenBytes(Serialize(header, raw_.data)); }
  std::string Message(const absl::Status& st) {
    EXPECT_FALSE(st.ok());
    EXPECT_THAT(std::string(st.message()), HasSubstr("model.safetensors"));  // names the file
    return std::string(st.message());
  }

  static constexpr const char* kTensor = "model.layers.0.mlp.up_proj.weight";
  std::string original_;
  Raw raw_;
  fs::path dir_;
};

TEST_F(SafetensorsDamage, CopyOpens) { EXPECT_TRUE(OpenBytes(Serialize(raw_.header, raw_.data)).ok()); }

TEST_F(SafetensorsDamage, TooShortForHeaderLength) {
  EXPECT_THAT(Message(OpenBytes(original_.substr(0, 5))), HasSubstr("too short"));
  EXPECT_THAT(Message(OpenBytes("")), HasSubstr("too short"));
}

TEST_F(SafetensorsDamage, TruncatedInHeader) {
  EXPECT_THAT(Message(OpenBytes(original_.substr(0, 100))), HasSubstr("exceeds the file size (100 bytes)"));
}

TEST_F(SafetensorsDamage, HeaderLengthLargerThanFile) {
  std::string bytes = original_;
  bytes.replace(0, 8, U64le(bytes.size()));
  EXPECT_THAT(Message(OpenBytes(bytes)), HasSubstr("header length"));
  bytes.replace(0, 8, U64le(~uint64_t{0}));  // must not overflow the size check
  EXPECT_THAT(Message(OpenBytes(bytes)), HasSubstr("exceeds the file size"));
}

TEST_F(SafetensorsDamage, HeaderLengthOverLimit) {
  // A sparse 200 MB file whose header length claims 150 MB: refused before parsing.
  const fs::path p = dir_ / "model.safetensors";
  WriteBytes(p, U64le(150'000'000));
  fs::resize_file(p, 200'000'000);
  absl::Status st = OpenSafetensors(dir_).status();
  EXPECT_THAT(Message(st), HasSubstr("100000000-byte limit"));
}

TEST_F(SafetensorsDamage, TruncatedInData) {
  // The tensor that ends last loses its tail.
  std::string last;
  uint64_t last_end = 0;
  for (const auto& [name, v] : raw_.header.items()) {
    if (name != "__metadata__" && v["data_offsets"][1].get<uint64_t>() > last_end) {
      last_end = v["data_offsets"][1].get<uint64_t>();
      last = name;
    }
  }
  const std::string msg = Message(OpenBytes(original_.substr(0, original_.size() - 100)));
  EXPECT_THAT(msg, HasSubstr(last));
  EXPECT_THAT(msg, HasSubstr("exceed the data section"));
  EXPECT_THAT(msg, HasSubstr("truncated"));
}

TEST_F(SafetensorsDamage, InvalidJson) {
  std::string h = "{\"a\": {\"dtype\": ";
  EXPECT_THAT(Message(OpenBytes(U64le(h.size()) + h)), HasSubstr("not valid JSON"));
  h = "[1, 2]  ";
  EXPECT_THAT(Message(OpenBytes(U64le(h.size()) + h)), HasSubstr("not a JSON object"));
}

TEST_F(SafetensorsDamage, ShapeDisagreesWithOffsets) {
  json h = raw_.header;
  h[kTensor]["shape"][0] = h[kTensor]["shape"][0].get<int>() + 1;
  const std::string msg = Message(OpenHeader(h));
  EXPECT_THAT(msg, HasSubstr(kTensor));
  EXPECT_THAT(msg, HasSubstr("needs"));
}

TEST_F(SafetensorsDamage, OffsetPastTheEnd) {
  json h = raw_.header;
  const uint64_t n = h[kTensor]["data_offsets"][1].get<uint64_t>() - h[kTensor]["data_offsets"][0].get<uint64_t>();
  h[kTensor]["data_offsets"] = {raw_.data.size() - n + 4, raw_.data.size() + 4};
  const std::string msg = Message(OpenHeader(h));
  EXPECT_THAT(msg, HasSubstr(kTensor));
  EXPECT_THAT(msg, HasSubstr("exceed the data section"));
}

TEST_F(SafetensorsDamage, ReversedOffsets) {
  json h = raw_.header;
  h[kTensor]["data_offsets"] = {h[kTensor]["data_offsets"][1], h[kTensor]["data_offsets"][0]};
  EXPECT_THAT(Message(OpenHeader(h)), HasSubstr("end before they begin"));
}

TEST_F(SafetensorsDamage, HugeShapeOverflows) {
  json h = raw_.header;
  h[kTensor]["shape"] = {int64_t{1} << 62, int64_t{1} << 62};
  std::string msg = Message(OpenHeader(h));
  EXPECT_THAT(msg, HasSubstr(kTensor));
  EXPECT_THAT(msg, HasSubstr("overflows"));
  h[kTensor]["shape"] = {int64_t{1} << 62, 2};  // fits in elements, not in bytes
  EXPECT_THAT(Message(OpenHeader(h)), HasSubstr("overflows"));
}

TEST_F(SafetensorsDamage, BadEntryFields) {
  json h = raw_.header;
  h[kTensor]["shape"][0] = -3;
  EXPECT_THAT(Message(OpenHeader(h)), HasSubstr("negative"));
  h = raw_.header;
  h[kTensor]["shape"][0] = 1.5;
  EXPECT_THAT(Message(OpenHeader(h)), HasSubstr("not an integer"));
  h = raw_.header;
  h[kTensor].erase("dtype");
  EXPECT_THAT(Message(OpenHeader(h)), HasSubstr("no 'dtype'"));
  h = raw_.header;
  h[kTensor]["dtype"] = 7;
  EXPECT_THAT(Message(OpenHeader(h)), HasSubstr("'dtype' is not a string"));
  h = raw_.header;
  h[kTensor]["shape"] = "4x4";
  EXPECT_THAT(Message(OpenHeader(h)), HasSubstr("'shape' is not an array"));
  h = raw_.header;
  h[kTensor]["data_offsets"] = {0};
  EXPECT_THAT(Message(OpenHeader(h)), HasSubstr("'data_offsets' must be two non-negative integers"));
  h = raw_.header;
  h[kTensor] = 12;
  EXPECT_THAT(Message(OpenHeader(h)), HasSubstr("not a JSON object"));
}

TEST_F(SafetensorsDamage, UnsupportedDtypeFailsOnlyWhenUsed) {
  // Re-type an F32 tensor of n values as U8 of 4n values (same bytes): the file opens, the
  // other tensors read, and Get() on this one names it and its dtype.
  json h = raw_.header;
  const int64_t n = h[kTensor]["shape"][0].get<int64_t>() * h[kTensor]["shape"][1].get<int64_t>();
  h[kTensor]["dtype"] = "U8";
  h[kTensor]["shape"] = {4 * n};
  h["extra.bogus"] = {{"dtype", "Q9"}, {"shape", {3}}, {"data_offsets", {0, 0}}};  // unknown: size unchecked
  WriteBytes(dir_ / "model.safetensors", Serialize(h, raw_.data));
  absl::StatusOr<std::unique_ptr<WeightStore>> store = OpenSafetensors(dir_);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE((*store)->Get("model.norm.weight").ok());
  EXPECT_TRUE((*store)->Has(kTensor));
  const std::string msg = Message((*store)->Get(kTensor).status());
  EXPECT_THAT(msg, HasSubstr(kTensor));
  EXPECT_THAT(msg, HasSubstr("dtype U8"));
  EXPECT_THAT(Message((*store)->Get("extra.bogus").status()), HasSubstr("dtype Q9"));
}

// Splits stories260K into two shards plus an index in a temp dir.
class SafetensorsSharded : public ::testing::Test {
 protected:
  void SetUp() override {
    raw_ = ReadRaw(kStoriesDir() / "model.safetensors");
    dir_ = test::MakeTempDir("st_sharded");
    json shard[2] = {json::object(), json::object()};
    std::string data[2];
    int i = 0;
    for (const auto& [name, v] : raw_.header.items()) {
      if (name == "__metadata__") continue;
      const int s = i++ % 2;
      const uint64_t b = v["data_offsets"][0], e = v["data_offsets"][1];
      shard[s][name] = {{"dtype", v["dtype"]}, {"shape", v["shape"]}, {"data_offsets", {data[s].size(), data[s].size() + e - b}}};
      data[s] += raw_.data.substr(b, e - b);
      index_["weight_map"][name] = kShards[s];
    }
    index_["metadata"] = {{"total_size", raw_.data.size()}};
    for (int s = 0; s < 2; ++s) {
      shard[s]["__metadata__"] = {{"format", "pt"}};
      WriteBytes(dir_ / kShards[s], Serialize(shard[s], data[s]));
    }
  }
  void TearDown() override { fs::remove_all(dir_); }
  void WriteIndex(const json& index) { std::ofstream(dir_ / "model.safetensors.index.json") << index.dump(1); }

  static constexpr const char* kShards[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  Raw raw_;
  json index_;
  fs::path dir_;
};

TEST_F(SafetensorsSharded, ReadsBackIdentical) {
  WriteIndex(index_);
  absl::StatusOr<std::unique_ptr<WeightStore>> sharded = OpenSafetensors(dir_);
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  absl::StatusOr<std::unique_ptr<WeightStore>> single = OpenSafetensors(kStoriesDir());
  ASSERT_TRUE(single.ok()) << single.status();
  ASSERT_EQ((*sharded)->Names(), (*single)->Names());
  std::set<std::string> files;
  for (const std::string& name : (*single)->Names()) {
    absl::StatusOr<TensorView> a = (*single)->Get(name);
    absl::StatusOr<TensorView> b = (*sharded)->Get(name);
    ASSERT_TRUE(a.ok() && b.ok()) << name;
    EXPECT_EQ(a->shape, b->shape) << name;
    EXPECT_EQ(a->dtype, b->dtype) << name;
    ASSERT_EQ(a->nbytes, b->nbytes) << name;
    EXPECT_EQ(std::memcmp(a->data, b->data, a->nbytes), 0) << name;
    files.insert(b->file);
  }
  EXPECT_EQ(files.size(), 2u);
  EXPECT_EQ((*sharded)->Describe(), dir_.string());
  absl::Status st = (*sharded)->Get("nope").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(st.message()), HasSubstr("model.safetensors.index.json"));
}

TEST_F(SafetensorsSharded, MissingShard) {
  json index = index_;
  index["weight_map"]["model.norm.weight"] = "model-00003-of-00002.safetensors";
  WriteIndex(index);
  absl::Status st = OpenSafetensors(dir_).status();
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("model-00003-of-00002.safetensors"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("model.norm.weight"));
}

TEST_F(SafetensorsSharded, TensorNotInItsShard) {
  json index = index_;
  const std::string shard = index["weight_map"]["model.norm.weight"];
  index["weight_map"]["model.norm.weight"] = shard == kShards[0] ? kShards[1] : kShards[0];
  WriteIndex(index);
  absl::Status st = OpenSafetensors(dir_).status();
  EXPECT_THAT(std::string(st.message()), HasSubstr("does not contain it"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("model.norm.weight"));
}

TEST_F(SafetensorsSharded, BadIndex) {
  std::ofstream(dir_ / "model.safetensors.index.json") << "{\"weight_map\": ";
  EXPECT_THAT(std::string(OpenSafetensors(dir_).status().message()), HasSubstr("not valid JSON"));
  WriteIndex(json{{"metadata", {}}});
  EXPECT_THAT(std::string(OpenSafetensors(dir_).status().message()), HasSubstr("weight_map"));
  json index = index_;
  index["weight_map"]["model.norm.weight"] = "../model.safetensors";
  WriteIndex(index);
  EXPECT_THAT(std::string(OpenSafetensors(dir_).status().message()), HasSubstr("not a file inside"));
  index["weight_map"]["model.norm.weight"] = 3;
  WriteIndex(index);
  EXPECT_THAT(std::string(OpenSafetensors(dir_).status().message()), HasSubstr("not a string"));
}

TEST(ToFloat32, ConvertsHalfAndBFloat16AndRejectsMismatch) {
  const uint16_t f16[3] = {0x3c00, 0xc000, 0x0001};  // 1, -2, 2^-24
  TensorView t{"w", graph::DType::kF16, {3}, reinterpret_cast<const uint8_t*>(f16), 6, "f.safetensors"};
  absl::StatusOr<std::vector<float>> v = quant::ToFloat32(t);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, (std::vector<float>{1.0f, -2.0f, 0x1p-24f}));
  const uint16_t bf16[2] = {0x3f80, 0x4049};  // 1, 3.140625
  t = TensorView{"w", graph::DType::kBF16, {1, 2}, reinterpret_cast<const uint8_t*>(bf16), 4, "f.safetensors"};
  v = quant::ToFloat32(t);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, (std::vector<float>{1.0f, 3.140625f}));
  t.nbytes = 6;
  absl::Status st = quant::ToFloat32(t).status();
  EXPECT_THAT(std::string(st.message()), HasSubstr("f.safetensors"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("'w'"));
  t.dtype = graph::DType::kQ8_0;
  EXPECT_FALSE(quant::ToFloat32(t).ok());
}

}  // namespace
}  // namespace doppler::formats
