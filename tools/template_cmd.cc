// doppler template: renders a chat template with the variables of a JSON file, printing exactly
// the rendered text. A template that refuses the conversation exits 1 with its message.
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "chat/chat_template.h"
#include "jinja/json_value.h"
#include "tools/cli_chat_template.h"
#include "tools/cli_engine.h"
#include "tools/commands.h"

namespace doppler::cli {
namespace {

CommandSpec Spec() {
  return CommandSpec{
      "template",
      "Render a chat template (Jinja, as transformers' apply_chat_template renders it) with the variables in a JSON\n"
      "file: messages, tools, add_generation_prompt, bos_token, eos_token and any others. Prints the text exactly.",
      {
          {"chat-template", "", "FILE", "the Jinja template", ""},
          {"model", "m", "PATH", "take the template and the special tokens of this model (HF directory or GGUF)", ""},
          {"tokenizer", "", "FILE", "with --model: the tokenizer to take them from instead", ""},
          {"context", "", "FILE", "a JSON object of the template's variables", ""},
          {"now", "", "TIME", "the instant strftime_now formats, 'YYYY-MM-DD HH:MM:SS' (default: now, local time)", ""},
      }};
}

absl::StatusOr<std::string> ReadText(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the ", what, " ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<std::tm> ParseNow(const std::string& text) {
  std::tm t{};
  std::istringstream in(text);
  in >> std::get_time(&t, "%Y-%m-%d %H:%M:%S");
  if (in.fail()) return absl::InvalidArgumentError(absl::StrCat("--now must be 'YYYY-MM-DD HH:MM:SS', not '", text, "'"));
  std::tm normalized = t;
  normalized.tm_isdst = -1;
  std::mktime(&normalized);  // fills in the weekday and the day of the year
  return normalized;
}

}  // namespace

absl::StatusOr<int> TemplateCommand(const std::vector<std::string>& argv) {
  const CommandSpec spec = Spec();
  absl::StatusOr<std::optional<ParsedArgs>> parsed = ParseOrHelp(spec, argv);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->has_value()) return 0;
  const ParsedArgs& args = **parsed;
  if (args.Has("chat-template") == args.Has("model")) {
    return absl::InvalidArgumentError("give exactly one of --chat-template FILE and --model PATH");
  }
  if (!args.Has("context")) return absl::InvalidArgumentError("--context FILE is required");
  absl::StatusOr<std::string> context_text = ReadText(args.Get("context"), "context");
  if (!context_text.ok()) return context_text.status();
  absl::StatusOr<jinja::Value> context = jinja::ValueFromJson(*context_text);
  if (!context.ok() || !context->is_dict()) {
    return absl::InvalidArgumentError(absl::StrCat(args.Get("context"), " must hold a JSON object of variables"));
  }
  std::unique_ptr<tokenizers::Tokenizer> tok;
  if (args.Has("model")) {
    absl::StatusOr<std::unique_ptr<tokenizers::Tokenizer>> t = OpenTokenizer(args);
    if (!t.ok()) return t.status();
    tok = *std::move(t);
  }
  absl::StatusOr<std::optional<jinja::Template>> tmpl = LoadChatTemplate(args, tok.get());
  if (!tmpl.ok()) return tmpl.status();
  if (!tmpl->has_value()) return absl::NotFoundError(NoChatTemplateMessage(args.Get("model")));

  // The context's variables; the model's special tokens where the context gives none.
  chat::ChatRequest request;
  chat::SpecialTokens special = tok ? SpecialTokensOf(*tok) : chat::SpecialTokens{};
  request.add_generation_prompt = false;
  for (const auto& [name, value] : context->as_dict()) {
    if (name == "messages") {
      request.messages = value;
    } else if (name == "tools") {
      request.tools = value;
    } else if (name == "add_generation_prompt") {
      request.add_generation_prompt = value.Truthy();
    } else if (name == "bos_token" && value.is_string()) {
      special.bos_token = value.as_string();
    } else if (name == "eos_token" && value.is_string()) {
      special.eos_token = value.as_string();
    } else {
      request.extra.emplace_back(name, value);
    }
  }
  jinja::RenderOptions options;
  if (args.Has("now")) {
    absl::StatusOr<std::tm> now = ParseNow(args.Get("now"));
    if (!now.ok()) return now.status();
    options.now = *now;
  }
  absl::StatusOr<std::string> text = chat::RenderChat(**tmpl, request, special, options);
  if (!text.ok()) return text.status();
  std::fwrite(text->data(), 1, text->size(), stdout);
  return 0;
}

}  // namespace doppler::cli
