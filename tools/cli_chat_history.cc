#include "tools/cli_chat_history.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace doppler::cli {

absl::StatusOr<std::vector<int32_t>> ChatHistory::NextTurn(const std::string& message) const {
  const bool first = turns_.empty();
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer_.Encode(format_.UserTurn(message, system_, first), false);
  if (!ids.ok()) return ids.status();
  // The previous reply's end is fed with this turn: its closing tokens were chosen, not fed.
  ids->insert(ids->begin(), first ? bos_.begin() : end_of_turn_.begin(), first ? bos_.end() : end_of_turn_.end());
  return ids;
}

absl::StatusOr<std::vector<int32_t>> ChatHistory::From(size_t first, const std::string& message) const {
  std::vector<int32_t> out = bos_;
  for (size_t t = first; t <= turns_.size(); ++t) {
    const std::string& text = t < turns_.size() ? turns_[t].message : message;
    if (t > first) out.insert(out.end(), end_of_turn_.begin(), end_of_turn_.end());
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer_.Encode(format_.UserTurn(text, system_, t == first), false);
    if (!ids.ok()) return ids.status();
    out.insert(out.end(), ids->begin(), ids->end());
    if (t < turns_.size()) out.insert(out.end(), turns_[t].reply.begin(), turns_[t].reply.end());
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> ChatHistory::Refeed(const std::string& message, int64_t budget, int& dropped) {
  for (size_t first = 1; first <= turns_.size(); ++first) {
    absl::StatusOr<std::vector<int32_t>> ids = From(first, message);
    if (!ids.ok()) return ids.status();
    if (static_cast<int64_t>(ids->size()) <= budget) {
      dropped = static_cast<int>(first);
      turns_.erase(turns_.begin(), turns_.begin() + static_cast<std::ptrdiff_t>(first));
      return ids;
    }
  }
  absl::StatusOr<std::vector<int32_t>> alone = From(turns_.size(), message);
  if (!alone.ok()) return alone.status();
  return absl::OutOfRangeError(absl::StrCat("this message takes ", alone->size(),
                                            " tokens with the system prompt, more than the context leaves for it (",
                                            budget, "): raise -c, --ctx-size"));
}

void ChatHistory::Add(const std::string& message, std::vector<int32_t> reply) {
  turns_.push_back({message, std::move(reply)});
}

}  // namespace doppler::cli
