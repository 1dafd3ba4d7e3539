// tokenizer.json's "model" of type BPE: the vocabulary, the ranked merges, and the encoding of
// one pre-tokenized piece (HF's options ignore_merges, byte_fallback, unk_token, fuse_unk).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace doppler::tokenizers {

class BpeModel {
 public:
  // Errors (unknown type, merges naming tokens outside the vocabulary, ...) name `where`.
  static absl::StatusOr<BpeModel> FromJson(const nlohmann::json& model, const std::string& where);

  // Appends the ids of one piece (already in the vocabulary's alphabet, e.g. byte-level).
  void Tokenize(std::string_view piece, std::vector<int32_t>& ids) const;

  std::optional<int32_t> Find(std::string_view token) const;
  // Every (token, id) of the vocabulary, in no particular order.
  std::vector<std::pair<std::string_view, int32_t>> Entries() const;

 private:
  // Heterogeneous lookup, so pieces are looked up as string_views without copies.
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::array<int32_t, 256> byte_ids_{};  // the <0xNN> tokens' ids, -1 where missing
};

}  // namespace doppler::tokenizers
