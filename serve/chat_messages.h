// A chat request's messages, tools and chat_template_kwargs as the variables a chat template
// expects, as transformers' apply_chat_template receives them: the request's key order kept (tojson
// prints tool schemas as given), a content of text parts joined into one string, tool calls'
// arguments parsed from their JSON string into objects.
#pragma once

#include <variant>

#include "jinja/value.h"
#include "serve/api_error.h"
#include "serve/chat_prompt.h"

namespace doppler::serve {

// `body` is the request body as a JSON object. Any fault is one ApiError naming the field.
std::variant<ChatConversation, ApiError> ChatConversationOf(const jinja::Value& body);

}  // namespace doppler::serve
