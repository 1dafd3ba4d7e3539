#include "serve/chat_prompt.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "jinja/json_value.h"
#include "serve/chat_messages.h"

namespace doppler::serve {
namespace {

// The server's template variables with the request's over them.
jinja::Dict MergedKwargs(const jinja::Dict& server, const jinja::Dict& request) {
  jinja::Dict out = server;
  for (const auto& [key, value] : request) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& kv) { return kv.first == key; });
    if (it != out.end()) {
      it->second = value;
    } else {
      out.emplace_back(key, value);
    }
  }
  return out;
}

absl::StatusOr<std::string> RenderTemplate(const ChatConversation& c, const ChatPromptOptions& options) {
  const chat::ChatRequest request{c.messages, c.tools, /*add_generation_prompt=*/true, MergedKwargs(options.kwargs, c.kwargs)};
  return chat::RenderChat(*options.chat_template, request, options.special_tokens);
}

// The built-in formats know system, user and assistant turns of plain text, nothing more.
absl::StatusOr<std::string> RenderBuiltIn(const ChatConversation& c, const chat::ChatFormat& f) {
  if (!c.tools.is_undefined()) {
    return absl::InvalidArgumentError(absl::StrCat("tools need the model's chat template; the built-in chat format '",
                                                   f.name, "' has no tool syntax (give one with --chat-template)"));
  }
  std::string system;
  std::string text;
  bool first_user = true;
  bool reply_open = false;  // the text ends where the assistant's reply starts
  const jinja::List& messages = c.messages.as_list();
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string role = messages[i].Find("role")->as_string();
    const jinja::Value* content_value = messages[i].Find("content");
    const std::string content = content_value != nullptr && content_value->is_string() ? content_value->as_string() : "";
    if (role == "system" || role == "developer") {
      if (!first_user) {
        return absl::InvalidArgumentError(
            absl::StrCat("messages[", i, "]: a system message must come before the first user message"));
      }
      absl::StrAppend(&system, system.empty() ? "" : "\n", content);
    } else if (role == "user") {
      if (reply_open) {  // two user messages in a row: the empty reply between them is closed
        absl::StrAppend(&text, f.end_of_turn);
      }
      absl::StrAppend(&text, f.UserTurn(content, system, first_user));
      first_user = false;
      reply_open = true;
    } else if (role == "assistant") {
      if (!reply_open) {
        return absl::InvalidArgumentError(absl::StrCat("messages[", i, "]: an assistant message must follow a user message"));
      }
      absl::StrAppend(&text, content);
      if (i + 1 < messages.size()) {
        absl::StrAppend(&text, f.end_of_turn);
        reply_open = false;
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("messages[", i, "].role: '", role, "' is not one of system, developer, ",
                                                     "user, assistant (the built-in chat format '", f.name, "')"));
    }
  }
  if (first_user) return absl::InvalidArgumentError("messages: there is no user message");
  if (!reply_open) return absl::InvalidArgumentError("messages: the last message must be from the user or the assistant");
  return text;
}

}  // namespace

absl::StatusOr<ChatPrompt> RenderChatPrompt(const ChatConversation& conversation, const ChatPromptOptions& options) {
  absl::StatusOr<std::string> text =
      options.chat_template ? RenderTemplate(conversation, options) : RenderBuiltIn(conversation, options.format);
  if (!text.ok()) return text.status();
  ChatPrompt out;
  out.text = *std::move(text);
  if (!options.special_tokens.eos_token.empty()) out.stop.push_back(options.special_tokens.eos_token);
  // Without its trailing newline: the turn ends at the marker whatever follows it.
  if (!options.chat_template) out.stop.emplace_back(absl::StripTrailingAsciiWhitespace(options.format.end_of_turn));
  return out;
}

std::variant<ChatPrompt, ApiError> ChatPromptOfRequest(const std::string& body, const ChatPromptOptions& options) {
  absl::StatusOr<jinja::Value> parsed = jinja::ValueFromJson(body);
  if (!parsed.ok() || !parsed->is_dict()) {
    return ApiError{400, "the request body must be a JSON object", "invalid_request_error", "", "invalid_json"};
  }
  std::variant<ChatConversation, ApiError> conversation = ChatConversationOf(*parsed);
  if (ApiError* e = std::get_if<ApiError>(&conversation)) return *e;
  const ChatConversation& c = std::get<ChatConversation>(conversation);
  absl::StatusOr<ChatPrompt> prompt = RenderChatPrompt(c, options);
  if (prompt.ok()) return *std::move(prompt);
  const std::string param = !options.chat_template && !c.tools.is_undefined() ? "tools" : "messages";
  const std::string message(prompt.status().message());
  // A refusal is the template's own word to the client; any other failure says where it happened.
  if (absl::IsFailedPrecondition(prompt.status())) return InvalidField(param, message);
  return InvalidField(param, options.chat_template ? absl::StrCat("the model's chat template: ", message) : message);
}

}  // namespace doppler::serve
