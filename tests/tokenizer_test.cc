// The HF tokenizers (Llama 3, Qwen3 tokenizer.json) against HF tokenizers 0.23.2's own encodings
// of 45 strings each (fixtures/tokenizers/*/encodings.json).
#include "tokenizers/tokenizer.h"

#include <chrono>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/fixtures.h"
#include "tokenizers/stream_decoder.h"
#include "tokenizers/utf8.h"

namespace doppler::tokenizers {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path FixtureDir(const std::string& name) { return test::FixturesDir() / "tokenizers" / name; }

json ReadJson(const fs::path& path) { return test::ReadJsonFile(path); }

// The tokenizer.json files ship gzip'd; each is unpacked once per test run (20 MB), removed at exit.
class UnpackedFixtures {
 public:
  ~UnpackedFixtures() {
    std::error_code ignored;
    for (const auto& [name, dir] : dirs_) fs::remove_all(dir, ignored);
  }

  fs::path Get(const std::string& name) {
    if (auto it = dirs_.find(name); it != dirs_.end()) return it->second;
    const fs::path dir = test::MakeTempDir("tokenizer_" + name);
    const std::string command =
        "tar xzf '" + (FixtureDir(name) / "tokenizer.tar.gz").string() + "' -C '" + dir.string() + "'";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    return dirs_[name] = dir;
  }

 private:
  std::map<std::string, fs::path> dirs_;
};

fs::path UnpackedDir(const std::string& name) {
  static UnpackedFixtures fixtures;
  return fixtures.Get(name);
}

// Loading takes most of a second, so the read-only tests share one tokenizer per fixture.
const Tokenizer* SharedTokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  if (auto it = loaded.find(name); it != loaded.end()) return it->second.get();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadHfTokenizer(UnpackedDir(name));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  if (!tokenizer.ok()) return nullptr;
  return (loaded[name] = *std::move(tokenizer)).get();
}

class HfFixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    tokenizer_ = SharedTokenizer(GetParam());
    ASSERT_NE(tokenizer_, nullptr);
    encodings_ = ReadJson(FixtureDir(GetParam()) / "encodings.json");
  }

  std::vector<int32_t> Ids(const json& array) const { return array.get<std::vector<int32_t>>(); }

  const Tokenizer* tokenizer_ = nullptr;
  json encodings_;
};

TEST_P(HfFixtureTest, VocabularySize) {
  EXPECT_EQ(tokenizer_->vocab_size(), encodings_["vocab_size_with_added"].get<int32_t>());
}

TEST_P(HfFixtureTest, EncodesEveryCaseExactly) {
  int passed = 0;
  for (const json& c : encodings_["cases"]) {
    const std::string text = c["text"];
    absl::StatusOr<std::vector<int32_t>> plain = tokenizer_->Encode(text, false);
    absl::StatusOr<std::vector<int32_t>> special = tokenizer_->Encode(text, true);
    ASSERT_TRUE(plain.ok() && special.ok()) << text;
    EXPECT_EQ(*plain, Ids(c["ids"])) << "text: " << text;
    EXPECT_EQ(*special, Ids(c["ids_add_special_tokens"])) << "text: " << text;
    passed += *plain == Ids(c["ids"]) && *special == Ids(c["ids_add_special_tokens"]);
  }
  EXPECT_EQ(passed, 45);
}

TEST_P(HfFixtureTest, DecodesEveryCaseExactly) {
  int passed = 0;
  for (const json& c : encodings_["cases"]) {
    const std::vector<int32_t> ids = Ids(c["ids"]);
    const std::string decoded = tokenizer_->Decode(ids, false);
    const std::string skipped = tokenizer_->Decode(ids, true);
    EXPECT_EQ(decoded, c["decoded"].get<std::string>()) << "text: " << c["text"];
    EXPECT_EQ(skipped, c["decoded_skip_special"].get<std::string>()) << "text: " << c["text"];
    passed += decoded == c["decoded"] && skipped == c["decoded_skip_special"];
  }
  EXPECT_EQ(passed, 45);
}

TEST_P(HfFixtureTest, StreamingEqualsWholeDecode) {
  for (const json& c : encodings_["cases"]) {
    const std::vector<int32_t> ids = Ids(c["ids"]);
    for (bool skip_special : {false, true}) {
      StreamDecoder stream(*tokenizer_, skip_special);
      std::string text;
      for (int32_t id : ids) {
        const std::string chunk = stream.Push(id);
        // Every chunk is whole characters: valid UTF-8 on its own.
        EXPECT_TRUE(IsValidUtf8(chunk)) << "text: " << c["text"];
        text += chunk;
      }
      text += stream.Flush();
      EXPECT_EQ(text, tokenizer_->Decode(ids, skip_special)) << "text: " << c["text"];
    }
  }
}

TEST_P(HfFixtureTest, StreamingEqualsWholeDecodeForRandomIds) {
  // Random ids make invalid UTF-8 (a lead byte without its continuation bytes and the like),
  // which Decode replaces with U+FFFD; the stream must make the same choices.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> any_id(0, tokenizer_->vocab_size() - 1);
  for (int sequence = 0; sequence < 200; ++sequence) {
    std::vector<int32_t> ids(1 + sequence % 40);
    for (int32_t& id : ids) id = any_id(rng) % (sequence % 2 == 0 ? 512 : tokenizer_->vocab_size());
    StreamDecoder stream(*tokenizer_, false);
    std::string text;
    for (int32_t id : ids) {
      const std::string chunk = stream.Push(id);
      EXPECT_TRUE(IsValidUtf8(chunk));
      text += chunk;
    }
    text += stream.Flush();
    EXPECT_EQ(text, tokenizer_->Decode(ids, false));
  }
}

TEST_P(HfFixtureTest, TokenBytesSpellTheDecodedText) {
  // Without special tokens, the pieces of a byte-level tokenizer concatenate to the text.
  for (const json& c : encodings_["cases"]) {
    const std::vector<int32_t> ids = Ids(c["ids"]);
    std::string bytes;
    bool any_special = false;
    for (int32_t id : ids) {
      bytes += tokenizer_->TokenBytes(id);
      any_special = any_special || tokenizer_->IsSpecial(id);
    }
    if (!any_special) {
      EXPECT_EQ(bytes, c["decoded"].get<std::string>()) << "text: " << c["text"];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfFixtureTest, ::testing::Values("llama3", "qwen3"));

TEST(HfTokenizerTest, Llama3SpecialIdsAndConfig) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadHfTokenizer(UnpackedDir("llama3"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->bos_id(), 128000);
  EXPECT_EQ((*tokenizer)->eos_ids(), std::vector<int32_t>{128001});
  EXPECT_TRUE((*tokenizer)->IsSpecial(128009));
  EXPECT_FALSE((*tokenizer)->IsSpecial(9906));
  EXPECT_NE((*tokenizer)->chat_template().find("start_header_id"), std::string::npos);
  // generation_config.json of the instruct models adds <|eom_id|> and <|eot_id|>.
  const int32_t extra[] = {128001, 128008, 128009};
  ASSERT_TRUE((*tokenizer)->SetExtraEos(extra).ok());
  EXPECT_EQ((*tokenizer)->eos_ids(), (std::vector<int32_t>{128001, 128008, 128009}));
  const int32_t bad[] = {128256};
  EXPECT_FALSE((*tokenizer)->SetExtraEos(bad).ok());
  EXPECT_EQ((*tokenizer)->TokenBytes(-1), "");
  EXPECT_EQ((*tokenizer)->TokenBytes(1 << 30), "");
}

TEST(HfTokenizerTest, Qwen3Config) {
  const Tokenizer* tokenizer = SharedTokenizer("qwen3");
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->bos_id(), std::nullopt);
  EXPECT_EQ(tokenizer->eos_ids(), std::vector<int32_t>{151645});  // <|im_end|>
  EXPECT_FALSE(tokenizer->IsSpecial(151667));                     // <think> is added, not special
  EXPECT_NE(tokenizer->chat_template().find("im_start"), std::string::npos);
}

TEST(HfTokenizerTest, RejectsInvalidUtf8) {
  const Tokenizer* tokenizer = SharedTokenizer("qwen3");
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->Encode("ab\xC3", false).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(HfTokenizerTest, LongInputsAreNotQuadratic) {
  const Tokenizer* tokenizer = SharedTokenizer("llama3");
  ASSERT_NE(tokenizer, nullptr);
  // One 200k-letter word and 200k spaces: BPE and the regex must not go quadratic.
  for (const std::string& text : {std::string(200000, 'a'), std::string(200000, ' ') + "x"}) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode(text, false);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(tokenizer->Decode(*ids, false), text);
    // Not a speed test: quadratic work on 200k letters takes minutes, linear work milliseconds.
    EXPECT_LT(seconds, 30.0);
  }
}


}  // namespace
}  // namespace doppler::tokenizers
