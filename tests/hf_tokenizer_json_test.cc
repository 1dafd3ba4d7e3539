// Hand-built tokenizer.json files: SentencePiece-style BPE (Llama 2 / TinyLlama's normalizer form,
// Mistral's Metaspace form) with ids worked out by hand, tokenizer_config.json overrides, and bad
// files that must give clear errors.
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/fixtures.h"
#include "tokenizers/byte_tokens.h"
#include "tokenizers/stream_decoder.h"
#include "tokenizers/tokenizer.h"

namespace doppler::tokenizers {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

// Ids: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then the pieces below.
constexpr int32_t kSpace = 259, kH = 260, kE = 261, kL = 262, kO = 263, kW = 264, kR = 265, kD = 266;
constexpr int32_t kSpaceH = 267, kLL = 268, kSpaceHe = 269, kSpaceHell = 270, kSpaceHello = 271;
constexpr int32_t kSpaceW = 272, kOR = 273, kSpaceWor = 274;

int32_t Byte(uint8_t b) { return 3 + b; }

json AddedToken(int id, const std::string& content) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

// Llama 2's tokenizer.json shape: Prepend + Replace normalizer, no pre-tokenizer, BOS template,
// Replace / ByteFallback / Fuse / Strip decoder.
json Llama2Style() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[ByteTokenName(static_cast<uint8_t>(b))] = Byte(static_cast<uint8_t>(b));
  const std::vector<std::string> pieces = {"▁",  "h",  "e",   "l",     "o",      "w",  "r",  "d",
                                           "▁h", "ll", "▁he", "▁hell", "▁hello", "▁w", "or", "▁wor"};
  for (size_t i = 0; i < pieces.size(); ++i) vocab[pieces[i]] = kSpace + static_cast<int>(i);
  return {
      {"version", "1.0"},
      {"added_tokens", {AddedToken(0, "<unk>"), AddedToken(1, "<s>"), AddedToken(2, "</s>")}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "▁"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges", {"▁ h", "l l", "▁h e", "▁he ll", "▁hell o", "▁ w", "o r", "▁w or"}}}},
  };
}

// Mistral's newer shape: no normalizer, Metaspace pre-tokenizer and decoder (prepend "first").
json MetaspaceStyle() {
  json j = Llama2Style();
  const json metaspace = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", false}};
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = metaspace;
  j["decoder"] = {{"type", "Sequence"}, {"decoders", {metaspace, {{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}};
  return j;
}

fs::path WriteModelDir(const json& tokenizer, const json& config = nullptr) {
  const fs::path dir = test::MakeTempDir("hf_tokenizer_json");
  std::ofstream(dir / "tokenizer.json") << tokenizer.dump();
  if (!config.is_null()) std::ofstream(dir / "tokenizer_config.json") << config.dump();
  return dir;
}

std::unique_ptr<Tokenizer> Load(const json& tokenizer, const json& config = nullptr) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> loaded = LoadHfTokenizer(WriteModelDir(tokenizer, config));
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return loaded.ok() ? *std::move(loaded) : nullptr;
}

std::vector<int32_t> Encode(const Tokenizer& tokenizer, const std::string& text, bool add_special) {
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(text, add_special);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

std::string Stream(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip_special) {
  StreamDecoder stream(tokenizer, skip_special);
  std::string text;
  for (int32_t id : ids) text += stream.Push(id);
  return text + stream.Flush();
}

TEST(SentencePieceStyleTest, MergesByRank) {
  std::unique_ptr<Tokenizer> t = Load(Llama2Style());
  ASSERT_NE(t, nullptr);
  // "▁hello▁world": ▁h, ll, ▁he, ▁hell, ▁hello, ▁w, or, ▁wor in rank order leave "l" and "d".
  EXPECT_EQ(Encode(*t, "hello world", false), (std::vector<int32_t>{kSpaceHello, kSpaceWor, kL, kD}));
  EXPECT_EQ(Encode(*t, "hello world", true), (std::vector<int32_t>{1, kSpaceHello, kSpaceWor, kL, kD}));
  // "▁he▁▁ol": the two spaces do not merge; "▁ h" needs an h right after the space.
  EXPECT_EQ(Encode(*t, "he  ol", false), (std::vector<int32_t>{kSpaceHe, kSpace, kSpace, kO, kL}));
  EXPECT_TRUE(Encode(*t, "", true) == std::vector<int32_t>{1});
}

TEST(SentencePieceStyleTest, DecodesLikeHf) {
  std::unique_ptr<Tokenizer> t = Load(Llama2Style());
  ASSERT_NE(t, nullptr);
  const std::vector<int32_t> ids = {1, kSpaceHello, kSpaceWor, kL, kD, 2};
  // Strip removes the space of the first piece only when it starts the text.
  EXPECT_EQ(t->Decode(ids, false), "<s> hello world</s>");
  EXPECT_EQ(t->Decode(ids, true), "hello world");
  EXPECT_EQ(Stream(*t, ids, false), "<s> hello world</s>");
  EXPECT_EQ(Stream(*t, ids, true), "hello world");
  EXPECT_EQ(t->TokenBytes(kSpaceHello), " hello");
  EXPECT_EQ(t->TokenBytes(Byte(0xF0)), "\xF0");
  EXPECT_EQ(t->TokenBytes(1), "<s>");
}

TEST(SentencePieceStyleTest, ByteFallback) {
  std::unique_ptr<Tokenizer> t = Load(Llama2Style());
  ASSERT_NE(t, nullptr);
  // "▁hi▁🐶": 'i' and the emoji are not pieces, so they become byte tokens.
  const std::vector<int32_t> ids = {kSpaceH, Byte('i'), kSpace, Byte(0xF0), Byte(0x9F), Byte(0x90), Byte(0xB6)};
  EXPECT_EQ(Encode(*t, "hi \xF0\x9F\x90\xB6", false), ids);
  EXPECT_EQ(t->Decode(ids, true), "hi \xF0\x9F\x90\xB6");
  // A run of byte tokens that is not UTF-8 gives one U+FFFD per byte, as HF's ByteFallback.
  const std::vector<int32_t> broken = {Byte(0xF0), Byte(0x9F), kO};
  EXPECT_EQ(t->Decode(broken, true), "\xEF\xBF\xBD\xEF\xBF\xBDo");
  EXPECT_EQ(Stream(*t, broken, true), "\xEF\xBF\xBD\xEF\xBF\xBDo");
}

TEST(SentencePieceStyleTest, StreamNeverSplitsACharacter) {
  std::unique_ptr<Tokenizer> t = Load(Llama2Style());
  ASSERT_NE(t, nullptr);
  StreamDecoder stream(*t);
  EXPECT_EQ(stream.Push(kSpaceH), "h");  // the first piece's space goes, as in Decode
  EXPECT_EQ(stream.Push(Byte(0xF0)), "");
  EXPECT_EQ(stream.Push(Byte(0x9F)), "");
  EXPECT_EQ(stream.Push(Byte(0x90)), "");
  EXPECT_EQ(stream.Push(Byte(0xB6)), "");  // a longer run could still follow
  EXPECT_EQ(stream.Push(kO), "\xF0\x9F\x90\xB6o");
  EXPECT_EQ(stream.Flush(), "");
}

TEST(SentencePieceStyleTest, StreamEqualsDecodeForRandomIds) {
  std::unique_ptr<Tokenizer> t = Load(Llama2Style());
  ASSERT_NE(t, nullptr);
  std::mt19937 rng(11);
  // Mostly byte tokens, so that runs of them are valid, invalid or cut short.
  std::uniform_int_distribution<int32_t> any_id(0, kSpaceWor);
  std::uniform_int_distribution<int32_t> utf8_byte(Byte(0x80), Byte(0xF4));
  for (int sequence = 0; sequence < 300; ++sequence) {
    std::vector<int32_t> ids(1 + sequence % 12);
    for (int32_t& id : ids) id = rng() % 3 == 0 ? any_id(rng) : utf8_byte(rng);
    for (bool skip_special : {false, true}) EXPECT_EQ(Stream(*t, ids, skip_special), t->Decode(ids, skip_special));
  }
}

TEST(SentencePieceStyleTest, UnknownCharactersWithoutByteFallback) {
  json j = Llama2Style();
  j["model"]["byte_fallback"] = false;
  std::unique_ptr<Tokenizer> t = Load(j);
  ASSERT_NE(t, nullptr);
  // fuse_unk: the run "xyz" becomes one <unk>.
  EXPECT_EQ(Encode(*t, "hxyz", false), (std::vector<int32_t>{kSpaceH, 0}));
  EXPECT_EQ(t->Decode(std::vector<int32_t>{kSpaceH, 0}, false), "h<unk>");
}

TEST(SentencePieceStyleTest, MetaspacePrependsOnlyAtTheStart) {
  std::unique_ptr<Tokenizer> t = Load(MetaspaceStyle());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Encode(*t, "hello world", true), (std::vector<int32_t>{1, kSpaceHello, kSpaceWor, kL, kD}));
  // After an added token the text is not at the input's start: no '▁' is prepended.
  EXPECT_EQ(Encode(*t, "<s>hello", false), (std::vector<int32_t>{1, kH, kE, kLL, kO}));
  // Metaspace's decoder drops '▁' from the first token it sees.
  EXPECT_EQ(t->Decode(std::vector<int32_t>{kSpaceHello, kSpaceWor, kL, kD}, false), "hello world");
  EXPECT_EQ(t->Decode(std::vector<int32_t>{1, kSpaceHello}, false), "<s> hello");
  EXPECT_EQ(t->Decode(std::vector<int32_t>{1, kSpaceHello}, true), "hello");
  EXPECT_EQ(Stream(*t, {1, kSpaceHello, kSpaceWor}, true), "hello wor");
}

TEST(SentencePieceStyleTest, TokenizerConfigOverridesTheTemplate) {
  const json config = {
      {"bos_token", "<s>"},
      {"eos_token", {{"content", "</s>"}, {"special", true}}},
      {"add_bos_token", false},
      {"add_eos_token", true},
      {"chat_template", {{{"name", "tool_use"}, {"template", "T"}}, {{"name", "default"}, {"template", "D"}}}}};
  std::unique_ptr<Tokenizer> t = Load(Llama2Style(), config);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Encode(*t, "hello", true), (std::vector<int32_t>{kSpaceHello, 2}));
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_ids(), std::vector<int32_t>{2});
  EXPECT_EQ(t->chat_template(), "D");
}

TEST(SentencePieceStyleTest, AddedTokensStripWhitespace) {
  json j = Llama2Style();
  j["added_tokens"].push_back(AddedToken(kD, "<mark>"));
  j["added_tokens"].back()["lstrip"] = true;
  j["added_tokens"].back()["rstrip"] = true;
  std::unique_ptr<Tokenizer> t = Load(j);
  ASSERT_NE(t, nullptr);
  // The spaces around <mark> belong to it, so "he" and "ol" are encoded without them.
  EXPECT_EQ(Encode(*t, "he \t<mark>  ol", false),
            (std::vector<int32_t>{kSpaceHe, kD, kSpace, kO, kL}));  // "▁he", <mark>, "▁ol"
}

TEST(SentencePieceStyleTest, NormalizedAddedTokensMatchTheirNormalizedSpelling) {
  json j = Llama2Style();
  j["added_tokens"].push_back(AddedToken(kR, "<x>"));
  j["added_tokens"].back()["normalized"] = true;
  std::unique_ptr<Tokenizer> t = Load(j);
  ASSERT_NE(t, nullptr);
  // The normalizer turns "<x>" into "▁<x>", so only a <x> after a space is the token.
  EXPECT_EQ(Encode(*t, "he <x>", false), (std::vector<int32_t>{kSpaceHe, kR}));
  EXPECT_EQ(Encode(*t, "he<x>", false), (std::vector<int32_t>{kSpaceHe, Byte('<'), Byte('x'), Byte('>')}));
}

// --- Bad files: each error is an InvalidArgument / NotFound naming the file and the problem.

absl::Status LoadError(const json& tokenizer, const json& config = nullptr) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> loaded = LoadHfTokenizer(WriteModelDir(tokenizer, config));
  EXPECT_FALSE(loaded.ok());
  return loaded.status();
}

TEST(HfTokenizerErrorsTest, MissingFile) {
  absl::Status status = LoadHfTokenizer(test::MakeTempDir("hf_tokenizer_empty")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()), HasSubstr("tokenizer.json"));
}

TEST(HfTokenizerErrorsTest, NotJson) {
  const fs::path dir = test::MakeTempDir("hf_tokenizer_not_json");
  std::ofstream(dir / "tokenizer.json") << "{\"model\": ";
  absl::Status status = LoadHfTokenizer(dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("tokenizer.json: not valid JSON"));
  EXPECT_THAT(std::string(LoadError(json::array()).message()), HasSubstr("expected a JSON object"));
}

TEST(HfTokenizerErrorsTest, UnsupportedModelType) {
  json j = Llama2Style();
  j["model"]["type"] = "Unigram";
  absl::Status status = LoadError(j);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("tokenizer.json: model: unsupported model type \"Unigram\""));
  j.erase("model");
  EXPECT_THAT(std::string(LoadError(j).message()), HasSubstr("missing \"model\""));
}

TEST(HfTokenizerErrorsTest, MergeOfUnknownTokens) {
  json j = Llama2Style();
  j["model"]["merges"].push_back("q u");
  EXPECT_THAT(std::string(LoadError(j).message()), HasSubstr("model.merges[8]: token \"q\" is not in the vocabulary"));
  j = Llama2Style();
  j["model"]["merges"].push_back({"h", "e"});  // "he" itself is not a token
  EXPECT_THAT(std::string(LoadError(j).message()), HasSubstr("token \"he\" is not in the vocabulary"));
  j = Llama2Style();
  j["model"]["merges"].push_back("h e l");
  EXPECT_THAT(std::string(LoadError(j).message()), HasSubstr("not two tokens"));
}

TEST(HfTokenizerErrorsTest, BadIdsAndFields) {
  json j = Llama2Style();
  j["model"]["vocab"]["h"] = -4;
  EXPECT_THAT(std::string(LoadError(j).message()), HasSubstr("vocab[\"h\"]: a token id must be an integer"));
  j = Llama2Style();
  j["model"]["vocab"]["h"] = 1LL << 40;
  EXPECT_THAT(std::string(LoadError(j).message()), HasSubstr("a token id must be an integer"));
  j = Llama2Style();
  j["added_tokens"][0]["content"] = 7;
  EXPECT_THAT(std::string(LoadError(j).message()), HasSubstr("added_tokens[0]: \"content\" must be a string"));
}

TEST(HfTokenizerErrorsTest, UnsupportedComponents) {
  json j = Llama2Style();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  EXPECT_THAT(std::string(LoadError(j).message()), HasSubstr("pre_tokenizer.pattern: regex /(unclosed/"));
  j = Llama2Style();
  j["normalizer"] = {{"type", "NFKD"}};
  EXPECT_THAT(std::string(LoadError(j).message()), HasSubstr("unsupported normalizer type \"NFKD\""));
  j = Llama2Style();
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_THAT(std::string(LoadError(j).message()), HasSubstr("unsupported decoder type \"WordPiece\""));
  j = Llama2Style();
  j["decoder"]["decoders"].erase(2);  // Strip without Fuse would strip every token
  EXPECT_THAT(std::string(LoadError(j).message()), HasSubstr("Strip is supported only after Fuse"));
}

TEST(HfTokenizerErrorsTest, BadTokenizerConfig) {
  absl::Status status = LoadError(Llama2Style(), {{"bos_token", "<nope>"}});
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("tokenizer_config.json: bos_token \"<nope>\" is not in tokenizer.json"));
  status = LoadError(Llama2Style(), {{"add_bos_token", "yes"}});
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("tokenizer_config.json: \"add_bos_token\" must be true or false"));
}

}  // namespace
}  // namespace doppler::tokenizers
