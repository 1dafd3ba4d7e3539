#include "models/chat_format.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace doppler::models {
namespace {

// Each format: the markers that identify its template, and the text it produces (as the
// families' own templates write it, with add_generation_prompt).
struct Known {
  std::vector<std::string> markers;
  ChatFormat format;
};

const std::vector<Known>& KnownFormats() {
  static const std::vector<Known> formats = {
      {{"<|im_start|>"},
       {"chatml", "<|im_start|>system\n", "<|im_end|>\n", "<|im_start|>user\n",
        "<|im_end|>\n<|im_start|>assistant\n", "<|im_end|>\n", false}},
      {{"<|start_header_id|>"},
       {"llama3", "<|start_header_id|>system<|end_header_id|>\n\n", "<|eot_id|>",
        "<|start_header_id|>user<|end_header_id|>\n\n", "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        "<|eot_id|>", false}},
      {{"<start_of_turn>"},
       {"gemma", "", "\n\n", "<start_of_turn>user\n", "<end_of_turn>\n<start_of_turn>model\n", "<end_of_turn>\n",
        true}},
      {{"<|user|>", "<|assistant|>"},
       {"phi3", "<|system|>\n", "<|end|>\n", "<|user|>\n", "<|end|>\n<|assistant|>\n", "<|end|>\n", false}},
      {{"[INST]"}, {"mistral", "", "\n\n", "[INST] ", " [/INST]", "</s>", true}},
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
  for (const Known& k : KnownFormats()) names.push_back(k.format.name);
  return names;
}

absl::StatusOr<ChatFormat> ChatFormatByName(const std::string& name) {
  for (const Known& k : KnownFormats()) {
    if (k.format.name == name) return k.format;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown chat format '", name, "'; formats: ", absl::StrJoin(SupportedChatFormats(), ", ")));
}

absl::StatusOr<ChatFormat> RecognizeChatTemplate(const std::string& jinja_template) {
  if (jinja_template.empty()) {
    return absl::NotFoundError("the model has no chat template (tokenizer_config.json: chat_template)");
  }
  for (const Known& k : KnownFormats()) {
    bool all = true;
    for (const std::string& m : k.markers) all = all && absl::StrContains(jinja_template, m);
    if (all) return k.format;
  }
  return absl::UnimplementedError(absl::StrCat("unrecognised chat template; supported formats: ",
                                               absl::StrJoin(SupportedChatFormats(), ", ")));
}

}  // namespace doppler::models
