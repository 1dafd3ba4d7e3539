// Incremental detokenization for printing generated text token by token.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tokenizers/tokenizer.h"

namespace doppler::tokenizers {

// Push returns only text that no later token can change, so it never emits half a UTF-8
// character, and (for SentencePiece-style tokenizers) the first piece loses its leading space
// exactly as in Decode. The concatenation of every Push and the final Flush equals
// tokenizer.Decode(all ids, skip_special). The tokenizer must outlive the decoder.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = true);

  std::string Push(int32_t id);
  // Returns what was held back and starts over, as for a new sequence.
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::unique_ptr<DecodeSession> session_;
};

}  // namespace doppler::tokenizers
