// A chat request's messages as the prompt text the model was trained on. Today this uses the
// built-in chat formats (models/chat_format.h); a Jinja chat-template interpreter replaces the body
// of RenderChatPrompt and nothing else.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/chat_format.h"

namespace doppler::serve {

struct ChatMessage {
  std::string role;  // "system", "developer", "user", "assistant"
  std::string content;
};

struct ChatPromptOptions {
  models::ChatFormat format;
};

struct ChatPrompt {
  std::string text;
  // Text that ends the assistant's turn; generation stops before it.
  std::vector<std::string> stop;
};

// The prompt for the assistant's next reply. `tools` (the request's tool definitions, as JSON
// text) must be empty: the built-in formats have no tool syntax. A last assistant message is
// continued rather than closed. InvalidArgument names the message that cannot be rendered.
absl::StatusOr<ChatPrompt> RenderChatPrompt(const std::vector<ChatMessage>& messages, const std::vector<std::string>& tools,
                                            const ChatPromptOptions& options);

}  // namespace doppler::serve
