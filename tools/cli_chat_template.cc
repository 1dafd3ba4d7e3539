#include "tools/cli_chat_template.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "jinja/json_value.h"
#include "tools/cli_interrupt.h"

namespace doppler::cli {

std::vector<OptionSpec> ChatTemplateOptionSpecs() {
  return {
      {"chat-template", "", "FILE", "a Jinja chat template to use instead of the model's", ""},
      {"chat-template-kwargs", "", "JSON",
       "more variables for the chat template, a JSON object, e.g. '{\"enable_thinking\": false}'", ""},
  };
}

absl::StatusOr<jinja::Dict> ChatTemplateKwargs(const ParsedArgs& args) {
  if (!args.Has("chat-template-kwargs")) return jinja::Dict{};
  absl::StatusOr<jinja::Value> v = jinja::ValueFromJson(args.Get("chat-template-kwargs"));
  if (!v.ok() || !v->is_dict()) {
    return absl::InvalidArgumentError("--chat-template-kwargs must be a JSON object, e.g. '{\"enable_thinking\": false}'");
  }
  return v->as_dict();
}

absl::StatusOr<std::optional<jinja::Template>> LoadChatTemplate(const ParsedArgs& args, const tokenizers::Tokenizer* tok) {
  std::string source;
  std::string where;
  if (args.Has("chat-template")) {
    where = args.Get("chat-template");
    std::ifstream in(where, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read the chat template ", where));
    std::ostringstream text;
    text << in.rdbuf();
    source = text.str();
  } else if (tok != nullptr && !tok->chat_template().empty()) {
    where = "the model's chat template";
    source = tok->chat_template();
  } else {
    return std::nullopt;
  }
  absl::StatusOr<jinja::Template> t = jinja::Template::Parse(source);
  if (!t.ok()) return absl::Status(t.status().code(), absl::StrCat(where, ": ", t.status().message()));
  return *std::move(t);
}

std::string NoChatTemplateMessage(const std::string& model_path) {
  const std::string where = runtime::IsGgufModel(model_path)
                                ? "the GGUF key tokenizer.chat_template"
                                : "tokenizer_config.json's chat_template or chat_template.jinja";
  return absl::StrCat("the model has no chat template (", where,
                      "): give one with --chat-template FILE, or a built-in format with --chat-format "
                      "chatml|llama3|gemma|phi3|mistral");
}

chat::SpecialTokens SpecialTokensOf(const tokenizers::Tokenizer& tok) {
  chat::SpecialTokens t;
  if (tok.bos_id()) t.bos_token = tok.TokenBytes(*tok.bos_id());
  if (!tok.eos_ids().empty()) t.eos_token = tok.TokenBytes(tok.eos_ids().front());
  return t;
}

absl::StatusOr<int> TemplateChat(runtime::Engine& engine, const tokenizers::Tokenizer& tok, const jinja::Template& tmpl,
                                 const ParsedArgs& args, const runtime::GenerationOptions& limits,
                                 const std::function<void(const std::string&)>& print,
                                 const std::function<absl::Status(const runtime::GenerationResult&)>& summary) {
  absl::StatusOr<jinja::Dict> extra = ChatTemplateKwargs(args);
  if (!extra.ok()) return extra.status();
  const chat::SpecialTokens special = SpecialTokensOf(tok);
  jinja::List messages;
  const bool has_system = args.Has("system-prompt");
  if (has_system) {
    messages.push_back(jinja::Value::MakeDict({{"role", "system"}, {"content", args.Get("system-prompt")}}));
  }
  auto render = [&]() -> absl::StatusOr<std::vector<int32_t>> {
    chat::ChatRequest request{jinja::Value::MakeList(messages), jinja::Value(), true, *extra};
    absl::StatusOr<std::string> text = chat::RenderChat(tmpl, request, special);
    if (!text.ok()) return text.status();
    return tok.Encode(*text, false);
  };
  // A turn is fed only where its reply has room: -n tokens, at most half the context.
  const int64_t reply_room = std::min(limits.max_tokens, engine.context() / 2);
  std::vector<int32_t> cached;  // the ids the KV cache holds, from position 0
  const std::string source = args.Has("chat-template") ? args.Get("chat-template") : "the model's";
  std::fprintf(stderr, "chat (template: %s); an empty line or end of input quits\n", source.c_str());
  std::string line;
  while (std::fprintf(stderr, "> "), std::getline(std::cin, line) && !line.empty()) {
    messages.push_back(jinja::Value::MakeDict({{"role", "user"}, {"content", line}}));
    absl::StatusOr<std::vector<int32_t>> ids = render();
    if (!ids.ok()) return ids.status();
    // The oldest user turn and its reply go first; the system prompt and the new line stay.
    int dropped = 0;
    const size_t first_turn = has_system ? 1 : 0;
    while (static_cast<int64_t>(ids->size()) + reply_room > engine.context()) {
      if (messages.size() < first_turn + 3) {
        return absl::OutOfRangeError(absl::StrCat("chat: the message and the system prompt take ", ids->size(),
                                                  " tokens, which with a reply of ", reply_room,
                                                  " do not fit the context of ", engine.context(), " (-c)"));
      }
      messages.erase(messages.begin() + static_cast<ptrdiff_t>(first_turn),
                     messages.begin() + static_cast<ptrdiff_t>(first_turn + 2));
      ++dropped;
      ids = render();
      if (!ids.ok()) return ids.status();
    }
    if (dropped > 0) {
      std::fprintf(stderr, "(the context is full: the oldest %d turn%s dropped, the system prompt kept)\n", dropped,
                   dropped == 1 ? " was" : "s were");
    }
    // Feed what follows the cached ids; when the rendering changed earlier text, start over.
    const bool extends = cached.size() < ids->size() && std::equal(cached.begin(), cached.end(), ids->begin());
    if (!extends) {
      engine.Reset();
      cached.clear();
    }
    const std::vector<int32_t> fresh(ids->begin() + static_cast<ptrdiff_t>(cached.size()), ids->end());
    ClearInterrupt();
    absl::StatusOr<runtime::GenerationResult> r = runtime::Generate(engine, tok, fresh, limits, print);
    if (!r.ok()) return r.status();
    print("\n");
    if (absl::Status s = summary(*r); !s.ok()) return s;
    cached.insert(cached.end(), fresh.begin(), fresh.end());
    cached.insert(cached.end(), r->tokens.begin(), r->tokens.end());
    cached.resize(std::min<size_t>(cached.size(), static_cast<size_t>(engine.position())));
    messages.push_back(jinja::Value::MakeDict({{"role", "assistant"}, {"content", r->text}}));
  }
  return 0;
}

}  // namespace doppler::cli
