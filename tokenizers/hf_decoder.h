// tokenizer.json's "decoder": how tokens turn back into text, as HF's decode() does it, run
// incrementally so streaming and whole-sequence decoding agree. Supported shapes:
//   - ByteLevel (GPT-2 alphabet back to bytes; invalid UTF-8 becomes U+FFFD as Rust's
//     from_utf8_lossy does on the whole output): Llama 3, Qwen;
//   - any of Replace (string pattern) and Metaspace, then optionally ByteFallback, Fuse, Strip
//     (after Fuse, start only), in that order: Llama 2, TinyLlama, Mistral, Gemma;
//   - none (null): tokens joined with spaces.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tokenizers/token_table.h"
#include "tokenizers/tokenizer.h"

namespace doppler::tokenizers {

class HfDecoder {
 public:
  static absl::StatusOr<HfDecoder> FromJson(const nlohmann::json& spec, const std::string& where);

  // The bytes `token` contributes to decoded text in the middle of a sequence.
  std::string PieceBytes(std::string_view token) const;

  // `table` must outlive the session.
  std::unique_ptr<DecodeSession> Start(const TokenTable& table, bool skip_special) const;

 private:
  class Session;
  enum class Kind { kJoinWithSpaces, kByteLevel, kPieces };
  // A per-token substitution (Replace, or Metaspace's '▁' -> ' '). Metaspace drops the character
  // instead in the first token (unless its prepend_scheme is "never"), hence `first_to`.
  struct Substitution {
    std::string from;
    std::string to;
    std::string first_to;
  };

  absl::Status Add(const nlohmann::json& spec, const std::string& where);
  std::string Substitute(std::string_view token, bool first) const;

  Kind kind_ = Kind::kJoinWithSpaces;
  std::vector<Substitution> substitutions_;
  bool byte_fallback_ = false;
  bool fused_ = false;
  std::string strip_;       // Strip: the character removed from the start of the text
  size_t strip_count_ = 0;  // ... at most this many times
};

}  // namespace doppler::tokenizers
