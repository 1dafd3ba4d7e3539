// The turns of a `doppler run --chat` session, kept so that a conversation longer than the context
// can go on: the oldest turns are dropped (the system prompt stays, on the oldest kept turn) and
// what is left is fed again from an empty cache.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "chat/chat_format.h"
#include "tokenizers/tokenizer.h"

namespace doppler::cli {

class ChatHistory {
 public:
  // `bos`: the ids that open the conversation (BOS, or none); `end_of_turn`: the ids that close a
  // reply, fed before the next user turn.
  ChatHistory(const chat::ChatFormat& format, const tokenizers::Tokenizer& tokenizer, std::string system,
              std::vector<int32_t> bos, std::vector<int32_t> end_of_turn)
      : format_(format), tokenizer_(tokenizer), system_(std::move(system)), bos_(std::move(bos)),
        end_of_turn_(std::move(end_of_turn)) {}

  // The ids that feed `message` as the next turn after the conversation so far is in the cache.
  absl::StatusOr<std::vector<int32_t>> NextTurn(const std::string& message) const;
  // The ids of the whole conversation from an empty cache, the oldest turns dropped (at least one,
  // as many as needed) until it and `message` take at most `budget` tokens; `dropped` says how many
  // went. An error when `message` with the system prompt alone does not fit.
  absl::StatusOr<std::vector<int32_t>> Refeed(const std::string& message, int64_t budget, int& dropped);
  // Records a finished turn: the message and the reply's ids.
  void Add(const std::string& message, std::vector<int32_t> reply);
  bool empty() const { return turns_.empty(); }

 private:
  struct Turn {
    std::string message;
    std::vector<int32_t> reply;
  };
  // The ids of turns_[first..] then `message`, from an empty cache.
  absl::StatusOr<std::vector<int32_t>> From(size_t first, const std::string& message) const;

  const chat::ChatFormat& format_;
  const tokenizers::Tokenizer& tokenizer_;
  std::string system_;
  std::vector<int32_t> bos_, end_of_turn_;
  std::vector<Turn> turns_;
};

}  // namespace doppler::cli
