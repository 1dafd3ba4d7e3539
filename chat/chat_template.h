// A model's own chat template (tokenizer_config.json's chat_template, or GGUF's
// tokenizer.chat_template) rendered as transformers' apply_chat_template renders it: the one place
// where a conversation becomes prompt text, for `run --chat`, `doppler template` and a server
// (which passes tools).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "jinja/template.h"
#include "jinja/value.h"

namespace doppler::chat {

struct ChatRequest {
  jinja::Value messages;              // a list of {"role", "content", ...} dicts
  jinja::Value tools;                 // a list of tool schemas; undefined when none are offered
  bool add_generation_prompt = true;  // end with the header of the assistant's reply
  jinja::Dict extra;                  // more variables, e.g. {"enable_thinking": false}
};

// The model's special tokens as text, as transformers passes them to the template.
struct SpecialTokens {
  std::string bos_token;
  std::string eos_token;
};

// Renders the conversation. A template that refuses it (raise_exception) gives
// FailedPrecondition with the template's message.
absl::StatusOr<std::string> RenderChat(const jinja::Template& chat_template, const ChatRequest& request,
                                       const SpecialTokens& tokens, const jinja::RenderOptions& options = {});

}  // namespace doppler::chat
