#include "tokenizers/added_tokens.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "tokenizers/json_fields.h"
#include "tokenizers/utf8.h"

namespace doppler::tokenizers {
namespace {

// The length of the whitespace character that ends at text[end) and starts at or after `begin`, or 0.
size_t WhitespaceBefore(std::string_view text, size_t begin, size_t end) {
  if (end <= begin) return 0;
  size_t start = end - 1;
  while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  size_t pos = start;
  const std::optional<char32_t> cp = NextCodePoint(text, pos);
  return cp && pos == end && IsUnicodeWhitespace(*cp) ? end - start : 0;
}

// The length of the whitespace character that starts at text[pos], or 0.
size_t WhitespaceAt(std::string_view text, size_t pos) {
  size_t next = pos;
  const std::optional<char32_t> cp = NextCodePoint(text, next);
  return cp && IsUnicodeWhitespace(*cp) ? next - pos : 0;
}

}  // namespace

absl::StatusOr<std::vector<AddedToken>> ParseAddedTokens(const nlohmann::json& added, const std::string& where) {
  std::vector<AddedToken> tokens;
  if (added.is_null()) return tokens;
  if (!added.is_array()) return JsonError(where, "expected an array");
  for (size_t i = 0; i < added.size(); ++i) {
    const std::string item_where = absl::StrCat(where, "[", i, "]");
    const nlohmann::json& item = added[i];
    AddedToken token;
    absl::StatusOr<int32_t> id = IdField(item, "id", item_where);
    if (!id.ok()) return id.status();
    token.id = *id;
    absl::StatusOr<std::string> content = StringField(item, "content", item_where);
    if (!content.ok()) return content.status();
    token.content = *std::move(content);
    for (auto [key, flag] : {std::pair{"special", &token.special}, std::pair{"lstrip", &token.lstrip},
                             std::pair{"rstrip", &token.rstrip}, std::pair{"normalized", &token.normalized}}) {
      absl::StatusOr<bool> value = BoolField(item, key, false, item_where);
      if (!value.ok()) return value.status();
      *flag = *value;
    }
    absl::StatusOr<bool> single_word = BoolField(item, "single_word", false, item_where);
    if (!single_word.ok()) return single_word.status();
    if (*single_word) return JsonError(item_where, "single_word added tokens are not supported");
    tokens.push_back(std::move(token));
  }
  return tokens;
}

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) : nodes_(1) {
  for (const AddedToken& token : tokens) {
    if (token.content.empty()) continue;
    int32_t node = 0;
    for (char c : token.content) {
      const auto byte = static_cast<unsigned char>(c);
      auto& children = nodes_[node].children;
      auto it = std::lower_bound(children.begin(), children.end(), std::pair<unsigned char, int32_t>{byte, -1});
      if (it != children.end() && it->first == byte) {
        node = it->second;
        continue;
      }
      const auto child = static_cast<int32_t>(nodes_.size());
      children.insert(it, {byte, child});
      nodes_.emplace_back();  // may move every node: `children` is not used after this
      node = child;
    }
    if (nodes_[node].token < 0) {
      nodes_[node].token = static_cast<int32_t>(tokens_.size());
      tokens_.push_back(token);
    }
  }
}

std::pair<int32_t, size_t> AddedTokenMatcher::LongestAt(std::string_view text, size_t pos) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const auto& children = nodes_[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), std::pair<unsigned char, int32_t>{byte, -1});
    if (it == children.end() || it->first != byte) break;
    node = it->second;
    if (nodes_[node].token >= 0) best = {nodes_[node].token, i + 1 - pos};
  }
  return best;
}

std::vector<AddedTokenMatcher::Piece> AddedTokenMatcher::Split(std::string_view text) const {
  std::vector<Piece> pieces;
  size_t plain_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const auto [index, length] = LongestAt(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t begin = pos, end = pos + length;
    if (token.lstrip) {
      while (size_t n = WhitespaceBefore(text, plain_start, begin)) begin -= n;
    }
    if (token.rstrip) {
      while (size_t n = WhitespaceAt(text, end)) end += n;
    }
    if (begin > plain_start) pieces.push_back({text.substr(plain_start, begin - plain_start), -1});
    pieces.push_back({text.substr(begin, end - begin), token.id});
    plain_start = pos = end;
  }
  if (plain_start < text.size()) pieces.push_back({text.substr(plain_start), -1});
  return pieces;
}

}  // namespace doppler::tokenizers
