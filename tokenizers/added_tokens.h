// tokenizer.json's "added_tokens" (special tokens such as <|begin_of_text|>, and others such as
// Qwen's <think>): they are found in the text before any other processing and become one id each.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace doppler::tokenizers {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;      // the match swallows whitespace before it
  bool rstrip = false;      // ... and after it
  bool normalized = false;  // matched in normalized text rather than the raw input
};

// The "added_tokens" array. single_word tokens are refused (no supported family uses them).
absl::StatusOr<std::vector<AddedToken>> ParseAddedTokens(const nlohmann::json& added, const std::string& where);

// Splits text at added tokens as HF does: the leftmost match first, the longest one at that place.
class AddedTokenMatcher {
 public:
  // Tokens with empty content are ignored; for repeated content the first token wins.
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);

  struct Piece {
    std::string_view text;  // the matched token's text, or plain text
    int32_t id;             // the token's id, or -1 for plain text to tokenize
  };
  std::vector<Piece> Split(std::string_view text) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    int32_t token = -1;                                       // index into tokens_ when a token ends here
  };
  // The longest token starting at text[pos]: {index into tokens_, length}, or {-1, 0}.
  std::pair<int32_t, size_t> LongestAt(std::string_view text, size_t pos) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;  // a byte trie; nodes_[0] is the root
};

}  // namespace doppler::tokenizers
