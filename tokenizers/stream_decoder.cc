#include "tokenizers/stream_decoder.h"

namespace doppler::tokenizers {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special), session_(tokenizer.StartDecode(skip_special)) {}

std::string StreamDecoder::Push(int32_t id) {
  std::string text;
  session_->Push(id, text);
  return text;
}

std::string StreamDecoder::Flush() {
  std::string text;
  session_->Finish(text);
  session_ = tokenizer_.StartDecode(skip_special_);
  return text;
}

}  // namespace doppler::tokenizers
