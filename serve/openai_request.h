// OpenAI's /v1/chat/completions and /v1/completions request bodies as sequences for the
// scheduler: every field checked for its type and range, the prompt rendered and tokenized, its
// length checked against the context. Any fault is one ApiError naming the field.
#pragma once

#include <optional>
#include <string>
#include <variant>

#include "nlohmann/json.hpp"
#include "serve/api_error.h"
#include "serve/chat_prompt.h"
#include "serve/sequence.h"
#include "tokenizers/tokenizer.h"

namespace doppler::serve {

enum class Endpoint { kChat, kCompletions };

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kChat;
  SequenceRequest sequence;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// What the mapping needs to know of the model.
struct ModelInfo {
  std::string id;                                // the "model" the responses name
  const tokenizers::Tokenizer* tokenizer = nullptr;  // null: token-id prompts only
  ChatPromptOptions chat;                        // how chat messages become the prompt
  int64_t context = 0;
  int32_t vocab_size = 0;
  bool add_bos = true;  // start text prompts with the tokenizer's BOS (a chat template writes its own)
};

// The request, or the error to send.
std::variant<CompletionRequest, ApiError> ParseCompletionRequest(Endpoint endpoint, const std::string& body,
                                                                 const ModelInfo& model);

// The body as a JSON object, or the error for malformed JSON / a non-object.
std::variant<nlohmann::json, ApiError> ParseJsonObject(const std::string& body);

}  // namespace doppler::serve
