#include "chat/chat_template.h"

#include <algorithm>

namespace doppler::chat {

absl::StatusOr<std::string> RenderChat(const jinja::Template& chat_template, const ChatRequest& request,
                                       const SpecialTokens& tokens, const jinja::RenderOptions& options) {
  jinja::Dict vars = {{"bos_token", jinja::Value(tokens.bos_token)}, {"eos_token", jinja::Value(tokens.eos_token)}};
  for (const auto& extra : request.extra) {
    auto it = std::find_if(vars.begin(), vars.end(), [&](const auto& kv) { return kv.first == extra.first; });
    if (it != vars.end()) {
      it->second = extra.second;
    } else {
      vars.push_back(extra);
    }
  }
  vars.emplace_back("messages", request.messages);
  if (!request.tools.is_undefined()) vars.emplace_back("tools", request.tools);
  vars.emplace_back("add_generation_prompt", jinja::Value(request.add_generation_prompt));
  return chat_template.Render(vars, options);
}

}  // namespace doppler::chat
