#include "chat/chat_format.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace doppler::chat {
namespace {

// The text each format produces, as the families' own templates write it (with
// add_generation_prompt).
const std::vector<ChatFormat>& KnownFormats() {
  static const std::vector<ChatFormat> formats = {
      {"chatml", "<|im_start|>system\n", "<|im_end|>\n", "<|im_start|>user\n",
        "<|im_end|>\n<|im_start|>assistant\n", "<|im_end|>\n", false},
      {"llama3", "<|start_header_id|>system<|end_header_id|>\n\n", "<|eot_id|>",
        "<|start_header_id|>user<|end_header_id|>\n\n", "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        "<|eot_id|>", false},
      {"gemma", "", "\n\n", "<start_of_turn>user\n", "<end_of_turn>\n<start_of_turn>model\n", "<end_of_turn>\n",
        true},
      {"phi3", "<|system|>\n", "<|end|>\n", "<|user|>\n", "<|end|>\n<|assistant|>\n", "<|end|>\n", false},
      {"mistral", "", "\n\n", "[INST] ", " [/INST]", "</s>", true},
  };
  return formats;
}

}  // namespace

std::string ChatFormat::UserTurn(const std::string& message, const std::string& system, bool first) const {
  if (!first || system.empty()) return absl::StrCat(user_prefix, message, user_suffix);
  if (system_in_first_user) return absl::StrCat(user_prefix, system, system_suffix, message, user_suffix);
  return absl::StrCat(system_prefix, system, system_suffix, user_prefix, message, user_suffix);
}

std::vector<std::string> SupportedChatFormats() {
  std::vector<std::string> names;
  for (const ChatFormat& f : KnownFormats()) names.push_back(f.name);
  return names;
}

absl::StatusOr<ChatFormat> ChatFormatByName(const std::string& name) {
  for (const ChatFormat& f : KnownFormats()) {
    if (f.name == name) return f;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown chat format '", name, "'; formats: ", absl::StrJoin(SupportedChatFormats(), ", ")));
}

}  // namespace doppler::chat
