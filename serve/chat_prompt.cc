#include "serve/chat_prompt.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"

namespace doppler::serve {

absl::StatusOr<ChatPrompt> RenderChatPrompt(const std::vector<ChatMessage>& messages, const std::vector<std::string>& tools,
                                            const ChatPromptOptions& options) {
  if (!tools.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("tools are not supported with the built-in chat format '",
                                                   options.format.name, "'"));
  }
  const models::ChatFormat& f = options.format;
  std::string system;
  std::string text;
  bool first_user = true;
  bool reply_open = false;  // the text ends where the assistant's reply starts
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system" || m.role == "developer") {
      if (!first_user) {
        return absl::InvalidArgumentError(
            absl::StrCat("messages[", i, "]: a system message must come before the first user message"));
      }
      absl::StrAppend(&system, system.empty() ? "" : "\n", m.content);
    } else if (m.role == "user") {
      if (reply_open) {  // two user messages in a row: the empty reply between them is closed
        absl::StrAppend(&text, f.end_of_turn);
      }
      absl::StrAppend(&text, f.UserTurn(m.content, system, first_user));
      first_user = false;
      reply_open = true;
    } else if (m.role == "assistant") {
      if (!reply_open) {
        return absl::InvalidArgumentError(
            absl::StrCat("messages[", i, "]: an assistant message must follow a user message"));
      }
      absl::StrAppend(&text, m.content);
      if (i + 1 < messages.size()) {
        absl::StrAppend(&text, f.end_of_turn);
        reply_open = false;
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("messages[", i, "].role: '", m.role,
                                                     "' is not one of system, developer, user, assistant"));
    }
  }
  if (first_user) return absl::InvalidArgumentError("messages: there is no user message");
  if (!reply_open) return absl::InvalidArgumentError("messages: the last message must be from the user or the assistant");
  ChatPrompt out;
  out.text = std::move(text);
  // Without its trailing newline: the turn ends at the marker whatever follows it.
  out.stop.emplace_back(absl::StripTrailingAsciiWhitespace(f.end_of_turn));
  return out;
}

}  // namespace doppler::serve
