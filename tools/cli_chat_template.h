// The model's chat template on the command line: --chat-template FILE and --chat-template-kwargs,
// finding the model's own template and special tokens, and the chat loop of `run --chat` that
// renders the whole conversation through it each turn.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "chat/chat_template.h"
#include "jinja/template.h"
#include "runtime/engine.h"
#include "runtime/generator.h"
#include "tokenizers/tokenizer.h"
#include "tools/cli_args.h"

namespace doppler::cli {

// --chat-template FILE, --chat-template-kwargs JSON.
std::vector<OptionSpec> ChatTemplateOptionSpecs();

// --chat-template-kwargs as template variables (a JSON object); empty when not given.
absl::StatusOr<jinja::Dict> ChatTemplateKwargs(const ParsedArgs& args);

// The template of --chat-template FILE, else the tokenizer's (nullopt when it has none).
absl::StatusOr<std::optional<jinja::Template>> LoadChatTemplate(const ParsedArgs& args, const tokenizers::Tokenizer* tok);

// What to say when a model ships no template: where it would be, and the options.
std::string NoChatTemplateMessage(const std::string& model_path);

// The tokenizer's BOS and first EOS token as text ("" where it has none).
chat::SpecialTokens SpecialTokensOf(const tokenizers::Tokenizer& tok);

// The interactive chat: each user line is added to the conversation, which is rendered whole
// (add_generation_prompt) and fed from where it stops matching what the KV cache holds. Where the
// rendered conversation and a reply (-n tokens, at most half the context) would not fit, the oldest
// turns are dropped (the system prompt stays) and it is fed again from an empty cache. A Ctrl-C
// ends the reply, not the chat. `summary` reports a finished turn; an error from it (the output
// could not be written) ends the chat.
absl::StatusOr<int> TemplateChat(runtime::Engine& engine, const tokenizers::Tokenizer& tok, const jinja::Template& tmpl,
                                 const ParsedArgs& args, const runtime::GenerationOptions& limits,
                                 const std::function<void(const std::string&)>& print,
                                 const std::function<absl::Status(const runtime::GenerationResult&)>& summary);

}  // namespace doppler::cli
