#include "tokenizers/tokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace doppler::tokenizers {

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::unique_ptr<DecodeSession> session = StartDecode(skip_special);
  std::string text;
  for (int32_t id : ids) session->Push(id, text);
  session->Finish(text);
  return text;
}

absl::Status AppendEosIds(std::span<const int32_t> ids, int32_t vocab_size, std::vector<int32_t>& eos) {
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("end-of-sequence id ", id, " is outside the vocabulary (size ", vocab_size, ")"));
    }
  }
  for (int32_t id : ids) {
    if (std::find(eos.begin(), eos.end(), id) == eos.end()) eos.push_back(id);
  }
  return absl::OkStatus();
}

}  // namespace doppler::tokenizers
