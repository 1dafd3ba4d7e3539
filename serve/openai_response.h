// OpenAI's response bodies: whole responses and server-sent-event chunks of /v1/chat/completions
// ("chat.completion", "chat.completion.chunk") and /v1/completions ("text_completion"), with
// logprobs and usage.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "serve/openai_request.h"
#include "serve/sequence.h"
#include "tokenizers/tokenizer.h"

namespace doppler::serve {

class ResponseBuilder {
 public:
  // `tokenizer` may be null (token ids then show as their numbers).
  ResponseBuilder(Endpoint endpoint, std::string id, int64_t created, std::string model,
                  const tokenizers::Tokenizer* tokenizer, bool logprobs);

  // The whole response of a request that did not stream.
  nlohmann::json Whole(const std::string& text, const std::vector<GeneratedToken>& tokens, FinishReason finish,
                       const Usage& usage);
  // One chunk: new text and its tokens; with a finish reason, the last chunk of the choice. The
  // first chat chunk also carries the assistant role. `with_usage`: "usage": null, as OpenAI
  // writes it on every chunk when the usage chunk was asked for.
  nlohmann::json Chunk(const std::string& text, const std::vector<GeneratedToken>& tokens,
                       std::optional<FinishReason> finish, bool with_usage);
  // The chunk after the last one that stream_options.include_usage asks for: no choices.
  nlohmann::json UsageChunk(const Usage& usage) const;

  static nlohmann::json UsageJson(const Usage& usage);

 private:
  nlohmann::json Logprobs(const std::vector<GeneratedToken>& tokens);
  std::string TokenText(int32_t id) const;
  nlohmann::json Envelope(const char* object) const;

  Endpoint endpoint_;
  std::string id_;
  int64_t created_;
  std::string model_;
  const tokenizers::Tokenizer* tokenizer_;
  bool logprobs_;
  bool sent_role_ = false;
  size_t text_offset_ = 0;  // /v1/completions logprobs' text_offset of the next token
};

}  // namespace doppler::serve
