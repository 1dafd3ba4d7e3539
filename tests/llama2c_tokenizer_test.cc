// llama2.c's tokenizer.bin (stories260K's tok512.bin) against run.c's own encodings and output
// (fixtures/stories260K/runc_golden.json).
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/fixtures.h"
#include "tokenizers/stream_decoder.h"
#include "tokenizers/tokenizer.h"

namespace doppler::tokenizers {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

fs::path StoriesDir() { return test::FixturesDir() / "stories260K"; }

json Golden() {
  return test::ReadJsonFile(StoriesDir() / "runc_golden.json");
}

std::unique_ptr<Tokenizer> LoadTok512() {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadLlama2cTokenizer(StoriesDir() / "tok512.bin");
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? *std::move(tokenizer) : nullptr;
}

TEST(Llama2cTokenizerTest, EncodesPromptsLikeRunC) {
  std::unique_ptr<Tokenizer> tokenizer = LoadTok512();
  ASSERT_NE(tokenizer, nullptr);
  const json golden = Golden();
  for (const json& c : golden["cases"]) {
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode(c["prompt"].get<std::string>(), true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, c["prompt_ids"].get<std::vector<int32_t>>()) << "prompt: " << c["prompt"];
  }
}

// run.c prints every token after the first (BOS) as it goes, then a newline.
TEST(Llama2cTokenizerTest, ReproducesRunCStdout) {
  std::unique_ptr<Tokenizer> tokenizer = LoadTok512();
  ASSERT_NE(tokenizer, nullptr);
  const json golden = Golden();
  for (const json& c : golden["cases"]) {
    const std::vector<int32_t> ids = c["sequence_ids"].get<std::vector<int32_t>>();
    const std::string stdout_text = c["stdout"].get<std::string>();
    EXPECT_EQ(tokenizer->Decode(ids, true) + "\n", stdout_text) << "prompt: " << c["prompt"];

    StreamDecoder stream(*tokenizer);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.Push(id);
    streamed += stream.Flush();
    EXPECT_EQ(streamed + "\n", stdout_text) << "prompt: " << c["prompt"];
  }
}

TEST(Llama2cTokenizerTest, ByteFallbackAndPieces) {
  std::unique_ptr<Tokenizer> tokenizer = LoadTok512();
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->vocab_size(), 512);
  EXPECT_EQ(tokenizer->bos_id(), 1);
  EXPECT_EQ(tokenizer->eos_ids(), std::vector<int32_t>{2});
  EXPECT_TRUE(tokenizer->IsSpecial(1));
  EXPECT_FALSE(tokenizer->IsSpecial(3));
  // The emoji has no piece: its four bytes fall back to ids byte + 3.
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode("\xF0\x9F\x90\xB6", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{410, 243, 162, 147, 185}));  // 410 is the dummy-prefix space
  EXPECT_EQ(tokenizer->TokenBytes(243), "\xF0");
  EXPECT_EQ(tokenizer->TokenBytes(410), " ");
  EXPECT_EQ(tokenizer->TokenBytes(512), "");
  // run.c prints EOS's piece when it is not skipped, and drops lone unprintable bytes.
  const int32_t with_eos[] = {1, 2, 243, 162};
  EXPECT_EQ(tokenizer->Decode(with_eos, false), "\n<s>\n\n</s>\n");
  EXPECT_EQ(tokenizer->Decode(with_eos, true), "");
  EXPECT_TRUE(tokenizer->Encode("", false)->empty());
}

class Llama2cBadFileTest : public ::testing::Test {
 protected:
  // A tokenizer.bin with `count` tokens; byte tokens are correct unless `corrupt_byte_token`.
  fs::path Write(int count, bool corrupt_byte_token, size_t truncate_by = 0) {
    std::string bytes;
    auto put_u32 = [&](uint32_t v) { bytes.append(reinterpret_cast<const char*>(&v), 4); };
    put_u32(8);
    for (int id = 0; id < count; ++id) {
      char byte_token[8];
      std::snprintf(byte_token, sizeof(byte_token), "<0x%02X>", (id - 3) & 0xFF);
      std::string piece = id < 3 ? "<x>" : id < 259 ? byte_token : "ab";
      if (corrupt_byte_token && id == 100) piece = "oops";
      const float score = 0;
      bytes.append(reinterpret_cast<const char*>(&score), 4);
      put_u32(static_cast<uint32_t>(piece.size()));
      bytes += piece;
    }
    bytes.resize(bytes.size() - truncate_by);
    const fs::path path = test::MakeTempDir("llama2c_bad") / "tokenizer.bin";
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
};

TEST_F(Llama2cBadFileTest, ClearErrors) {
  EXPECT_TRUE(LoadLlama2cTokenizer(Write(300, false)).ok());
  const fs::path missing = test::MakeTempDir("llama2c_missing") / "nope.bin";
  EXPECT_EQ(LoadLlama2cTokenizer(missing).status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(LoadLlama2cTokenizer(Write(300, false, 1)).status().message(), HasSubstr("claims 2 bytes"));
  EXPECT_THAT(LoadLlama2cTokenizer(Write(300, false, 5)).status().message(), HasSubstr("truncated entry"));
  EXPECT_THAT(LoadLlama2cTokenizer(Write(100, false)).status().message(), HasSubstr("at least 259"));
  absl::Status corrupt = LoadLlama2cTokenizer(Write(300, true)).status();
  EXPECT_THAT(corrupt.message(), HasSubstr("<0x61>"));
  EXPECT_THAT(corrupt.message(), HasSubstr("tokenizer.bin"));
}

}  // namespace
}  // namespace doppler::tokenizers
