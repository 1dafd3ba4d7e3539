// A chat request's conversation as the prompt text the model was trained on: rendered through the
// model's own chat template (chat/chat_template.h, as `run --chat` renders it), or through a
// built-in chat format (chat/chat_format.h) for a model that ships no template.
#pragma once

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "chat/chat_format.h"
#include "chat/chat_template.h"
#include "jinja/template.h"
#include "jinja/value.h"
#include "serve/api_error.h"

namespace doppler::serve {

// How the server renders chat prompts.
struct ChatPromptOptions {
  std::shared_ptr<const jinja::Template> chat_template;  // null: the built-in format
  chat::ChatFormat format;                             // used only without a template
  chat::SpecialTokens special_tokens;                  // bos_token and eos_token as the template sees them
  jinja::Dict kwargs;                                    // --chat-template-kwargs; a request's own go over them
};

// A request's conversation as template variables (serve/chat_messages.h makes it).
struct ChatConversation {
  jinja::Value messages;  // a list of dicts, with the request's fields
  jinja::Value tools;     // a list of tool schemas; undefined when none are offered
  jinja::Dict kwargs;     // the request's chat_template_kwargs
};

struct ChatPrompt {
  std::string text;
  // Text that ends the assistant's turn; generation stops before it.
  std::vector<std::string> stop;
};

// The prompt for the assistant's next reply (add_generation_prompt). Through a template, a refusal
// (raise_exception) is FailedPrecondition carrying the template's message. Through a built-in
// format, tools are refused, a last assistant message is continued rather than closed, and
// InvalidArgument names the message that cannot be rendered.
absl::StatusOr<ChatPrompt> RenderChatPrompt(const ChatConversation& conversation, const ChatPromptOptions& options);

// A /v1/chat/completions body's prompt, or the error to send: a malformed field, or the template's
// refusal, are 400 invalid_request_error carrying the message.
std::variant<ChatPrompt, ApiError> ChatPromptOfRequest(const std::string& body, const ChatPromptOptions& options);

}  // namespace doppler::serve
