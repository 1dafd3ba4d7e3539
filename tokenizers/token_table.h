// An HF tokenizer's id -> token string table: the model's vocabulary with the added tokens laid
// over it, plus which ids are special. Ids that nothing names are holes (HF's decode skips them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace doppler::tokenizers {

class TokenTable {
 public:
  void Set(int32_t id, std::string token, bool special) {
    if (id >= size()) {
      tokens_.resize(id + 1);
      kinds_.resize(id + 1, Kind::kHole);
    }
    tokens_[id] = std::move(token);
    kinds_[id] = special ? Kind::kSpecial : Kind::kNormal;
  }

  // nullptr for a hole or an id out of range.
  const std::string* Find(int32_t id) const {
    return id >= 0 && id < size() && kinds_[id] != Kind::kHole ? &tokens_[id] : nullptr;
  }
  bool IsSpecial(int32_t id) const { return id >= 0 && id < size() && kinds_[id] == Kind::kSpecial; }
  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }

 private:
  enum class Kind : uint8_t { kHole, kNormal, kSpecial };
  std::vector<std::string> tokens_;
  std::vector<Kind> kinds_;
};

}  // namespace doppler::tokenizers
