// The tokenizer building blocks on their own: NFC, lossy UTF-8, Split behaviours, BPE merge order.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tokenizers/bpe_merge.h"
#include "tokenizers/pre_tokenizer.h"
#include "tokenizers/unicode_nfc.h"
#include "tokenizers/utf8.h"

namespace doppler::tokenizers {
namespace {

TEST(NfcTest, ComposesReordersAndKeepsNfcText) {
  EXPECT_EQ(NfcNormalize("plain ascii"), "plain ascii");
  EXPECT_EQ(NfcNormalize("e\xCC\x81"), "\xC3\xA9");  // e + U+0301 -> é
  // s + dot below (220) + dot above (230), in either order -> U+1E69.
  EXPECT_EQ(NfcNormalize("s\xCC\xA3\xCC\x87"), "\xE1\xB9\xA9");
  EXPECT_EQ(NfcNormalize("s\xCC\x87\xCC\xA3"), "\xE1\xB9\xA9");
  // Hangul jamo L + V + T -> one syllable (한).
  EXPECT_EQ(NfcNormalize("\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB"), "\xED\x95\x9C");
  // A composition exclusion stays decomposed: U+0958 (क़) -> U+0915 U+093C.
  EXPECT_EQ(NfcNormalize("\xE0\xA5\x98"), "\xE0\xA4\x95\xE0\xA4\xBC");
  // The Ångström sign is a singleton: it becomes Å (U+00C5).
  EXPECT_EQ(NfcNormalize("\xE2\x84\xAB"), "\xC3\x85");
}

std::string Sanitize(const std::string& bytes) {
  Utf8Sanitizer sanitizer;
  std::string out;
  sanitizer.Feed(bytes, out);
  sanitizer.Finish(out);
  return out;
}

TEST(Utf8SanitizerTest, ReplacesMaximalInvalidSubsequences) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(Sanitize("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(Sanitize("\xE2\x82"
                     "a"),
            fffd + "a");                                    // truncated 3-byte sequence: one U+FFFD
  EXPECT_EQ(Sanitize("\xED\xA0\x80"), fffd + fffd + fffd);  // a surrogate: each byte
  EXPECT_EQ(Sanitize("\xF0\x9F\x90"), fffd);                // unfinished at the end
  EXPECT_EQ(Sanitize("\xC0\xAF"), fffd + fffd);             // overlong
  Utf8Sanitizer sanitizer;
  std::string out;
  sanitizer.Feed("\xF0\x9F", out);
  EXPECT_EQ(out, "");  // held back: the character may still complete
  sanitizer.Feed("\x90\xB6", out);
  EXPECT_EQ(out, "\xF0\x9F\x90\xB6");
}

std::vector<std::string> SplitWith(const std::string& behavior, const std::string& text) {
  const nlohmann::json spec = {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}};
  absl::StatusOr<PreTokenizer> pre_tokenizer = PreTokenizer::FromJson(spec, "test");
  EXPECT_TRUE(pre_tokenizer.ok()) << pre_tokenizer.status();
  absl::StatusOr<std::vector<std::string>> pieces = pre_tokenizer->Split(text, true);
  EXPECT_TRUE(pieces.ok()) << pieces.status();
  return *pieces;
}

TEST(PreTokenizerTest, SplitBehavioursMatchHfDocumentation) {
  using V = std::vector<std::string>;
  const std::string text = "the-final--countdown";
  EXPECT_EQ(SplitWith("Isolated", text), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(SplitWith("Removed", text), (V{"the", "final", "countdown"}));
  EXPECT_EQ(SplitWith("MergedWithPrevious", text), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(SplitWith("MergedWithNext", text), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(SplitWith("Contiguous", text), (V{"the", "-", "final", "--", "countdown"}));
}

TEST(PreTokenizerTest, ByteLevelWithGpt2Regex) {
  const nlohmann::json spec = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  absl::StatusOr<PreTokenizer> pre_tokenizer = PreTokenizer::FromJson(spec, "test");
  ASSERT_TRUE(pre_tokenizer.ok()) << pre_tokenizer.status();
  absl::StatusOr<std::vector<std::string>> pieces = pre_tokenizer->Split("Hi  it's", true);
  ASSERT_TRUE(pieces.ok());
  // "Ġ" (U+0120) spells a space.
  EXPECT_EQ(*pieces, (std::vector<std::string>{"\xC4\xA0Hi", "\xC4\xA0", "\xC4\xA0it", "'s"}));
}

TEST(MergeSymbolsTest, LowestPriorityFirstThenLeftmost) {
  // Symbols 1 1 1 with one rule 1+1 -> 2: the leftmost pair merges first, giving 2 1.
  std::vector<int32_t> symbols = {1, 1, 1};
  MergeSymbols(symbols, [](int32_t a, int32_t b) -> std::optional<MergeStep> {
    if (a == 1 && b == 1) return MergeStep{0, 2};
    return std::nullopt;
  });
  EXPECT_EQ(symbols, (std::vector<int32_t>{2, 1}));
  // With 2+3 -> 4 (priority 0) and 1+2 -> 5 (priority 1), "1 2 3" becomes "1 4", not "5 3".
  symbols = {1, 2, 3};
  MergeSymbols(symbols, [](int32_t a, int32_t b) -> std::optional<MergeStep> {
    if (a == 2 && b == 3) return MergeStep{0, 4};
    if (a == 1 && b == 2) return MergeStep{1, 5};
    return std::nullopt;
  });
  EXPECT_EQ(symbols, (std::vector<int32_t>{1, 4}));
}

}  // namespace
}  // namespace doppler::tokenizers
