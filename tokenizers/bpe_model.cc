#include "tokenizers/bpe_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "tokenizers/bpe_merge.h"
#include "tokenizers/byte_tokens.h"
#include "tokenizers/json_fields.h"
#include "tokenizers/utf8.h"

namespace doppler::tokenizers {
namespace {

// A merge as its two token strings: "a b" (older files) or ["a", "b"].
absl::StatusOr<std::pair<std::string, std::string>> MergeParts(const nlohmann::json& merge, const std::string& where) {
  if (merge.is_string()) {
    const std::string text = merge.get<std::string>();
    const size_t space = text.find(' ');
    if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
      return JsonError(where, absl::StrCat("merge \"", text, "\" is not two tokens separated by one space"));
    }
    return std::pair{text.substr(0, space), text.substr(space + 1)};
  }
  if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
    return std::pair{merge[0].get<std::string>(), merge[1].get<std::string>()};
  }
  return JsonError(where, "a merge must be \"a b\" or [\"a\", \"b\"]");
}

// An optional string field that may be null or "" to mean "none".
absl::StatusOr<std::string> OptionalString(const nlohmann::json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::string();
  return StringField(obj, key, where);
}

}  // namespace

absl::StatusOr<BpeModel> BpeModel::FromJson(const nlohmann::json& model, const std::string& where) {
  absl::StatusOr<std::string> type = StringField(model, "type", where);
  if (!type.ok()) return type.status();
  if (*type != "BPE") return JsonError(where, absl::StrCat("unsupported model type \"", *type, "\" (only BPE)"));
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    absl::StatusOr<std::string> affix = OptionalString(model, key, where);
    if (!affix.ok()) return affix.status();
    if (!affix->empty()) return JsonError(where, absl::StrCat("BPE with a ", key, " is not supported"));
  }

  BpeModel bpe;
  const auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) return JsonError(where, "\"vocab\" must be an object");
  bpe.vocab_.reserve(vocab->size());
  for (const auto& [token, value] : vocab->items()) {
    absl::StatusOr<int32_t> id = IdValue(value, absl::StrCat(where, ".vocab[\"", token, "\"]"));
    if (!id.ok()) return id.status();
    bpe.vocab_.emplace(token, *id);
  }

  const auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array()) return JsonError(where, "\"merges\" must be an array");
  bpe.merges_.reserve(merges->size());
  for (size_t rank = 0; rank < merges->size(); ++rank) {
    const std::string merge_where = absl::StrCat(where, ".merges[", rank, "]");
    absl::StatusOr<std::pair<std::string, std::string>> parts = MergeParts((*merges)[rank], merge_where);
    if (!parts.ok()) return parts.status();
    const auto& [left, right] = *parts;
    const std::string joined = left + right;
    const std::optional<int32_t> left_id = bpe.Find(left), right_id = bpe.Find(right), merged = bpe.Find(joined);
    const std::string* missing = !left_id ? &left : !right_id ? &right : !merged ? &joined : nullptr;
    if (missing != nullptr) {
      return JsonError(merge_where, absl::StrCat("token \"", *missing, "\" is not in the vocabulary"));
    }
    // A repeated pair keeps its first (best) rank.
    bpe.merges_.emplace(PairKey(*left_id, *right_id), Merge{static_cast<int32_t>(rank), *merged});
  }

  absl::StatusOr<std::string> unk = OptionalString(model, "unk_token", where);
  if (!unk.ok()) return unk.status();
  if (!unk->empty()) {
    bpe.unk_id_ = bpe.Find(*unk);
    if (!bpe.unk_id_) return JsonError(where, absl::StrCat("unk_token \"", *unk, "\" is not in the vocabulary"));
  }
  for (auto [key, flag] : {std::pair{"fuse_unk", &bpe.fuse_unk_}, std::pair{"byte_fallback", &bpe.byte_fallback_},
                           std::pair{"ignore_merges", &bpe.ignore_merges_}}) {
    absl::StatusOr<bool> value = BoolField(model, key, false, where);
    if (!value.ok()) return value.status();
    *flag = *value;
  }
  // "dropout" is ignored: it randomizes merges for training, and inference wants HF's
  // deterministic output.
  for (int b = 0; b < 256; ++b) bpe.byte_ids_[b] = bpe.Find(ByteTokenName(static_cast<uint8_t>(b))).value_or(-1);
  return bpe;
}

std::optional<int32_t> BpeModel::Find(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::pair<std::string_view, int32_t>> BpeModel::Entries() const {
  std::vector<std::pair<std::string_view, int32_t>> entries;
  entries.reserve(vocab_.size());
  for (const auto& [token, id] : vocab_) entries.emplace_back(token, id);
  return entries;
}

void BpeModel::Tokenize(std::string_view piece, std::vector<int32_t>& ids) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    if (std::optional<int32_t> whole = Find(piece)) {
      ids.push_back(*whole);
      return;
    }
  }
  // One symbol per character; characters outside the vocabulary become byte tokens, else <unk>
  // (one for a run of them with fuse_unk), else nothing, as in HF.
  std::vector<int32_t> symbols;
  bool last_was_unk = false;
  for (size_t pos = 0; pos < piece.size();) {
    const size_t start = pos;
    if (!NextCodePoint(piece, pos)) pos = start + 1;  // pieces come from valid UTF-8; never stall
    const std::string_view character = piece.substr(start, pos - start);
    if (std::optional<int32_t> id = Find(character)) {
      symbols.push_back(*id);
      last_was_unk = false;
      continue;
    }
    if (byte_fallback_ && std::all_of(character.begin(), character.end(),
                                      [&](char c) { return byte_ids_[static_cast<unsigned char>(c)] >= 0; })) {
      for (char c : character) symbols.push_back(byte_ids_[static_cast<unsigned char>(c)]);
      last_was_unk = false;
      continue;
    }
    if (unk_id_ && !(fuse_unk_ && last_was_unk)) symbols.push_back(*unk_id_);
    last_was_unk = unk_id_.has_value();
  }
  MergeSymbols(symbols, [this](int32_t left, int32_t right) -> std::optional<MergeStep> {
    auto it = merges_.find(PairKey(left, right));
    if (it == merges_.end()) return std::nullopt;
    return MergeStep{static_cast<double>(it->second.rank), it->second.merged};
  });
  ids.insert(ids.end(), symbols.begin(), symbols.end());
}

}  // namespace doppler::tokenizers
