// Built-in chat formats of five families, for models that ship no chat template (a model's own
// template is rendered by chat/chat_template.h): each writes the text its family's template
// writes for user/assistant turns and a system prompt.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace doppler::chat {

struct ChatFormat {
  std::string name;           // "chatml", "llama3", "gemma", "mistral", "phi3"
  std::string system_prefix;  // wraps a system prompt: prefix + text + system_suffix
  std::string system_suffix;
  std::string user_prefix;    // a user turn and the header of the reply that follows it
  std::string user_suffix;
  std::string end_of_turn;    // the text that closes an assistant reply
  bool system_in_first_user = false;  // no system role: the system prompt opens the first user turn

  // The text of one user turn (with a system prompt on the first turn) up to where the
  // assistant's reply starts.
  std::string UserTurn(const std::string& message, const std::string& system, bool first) const;
};

// A built-in format by name.
absl::StatusOr<ChatFormat> ChatFormatByName(const std::string& name);
std::vector<std::string> SupportedChatFormats();

}  // namespace doppler::chat
