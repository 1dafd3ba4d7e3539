// doppler run: generation from a text prompt (streamed), from token ids, or as a chat.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chat/chat_format.h"
#include "runtime/generator.h"
#include "runtime/profile.h"
#include "tools/cli_batch.h"
#include "tools/cli_chat_history.h"
#include "tools/cli_chat_template.h"
#include "tools/cli_engine.h"
#include "tools/cli_interrupt.h"
#include "tools/cli_prompt_text.h"
#include "tools/commands.h"

namespace doppler::cli {
namespace {

CommandSpec Spec() {
  CommandSpec spec{"run",
                   "Generate text from a prompt (-p, -f, or standard input), from prompt token ids (--prompt-ids), or\n"
                   "chat (--chat). The prompt is echoed, then the generation streams as it is produced; a summary goes\n"
                   "to stderr. Ctrl-C stops the generation (in a chat: the reply), a second Ctrl-C exits.",
                   EngineOptionSpecs()};
  const std::vector<OptionSpec> more = {
      {"prompt", "p", "TEXT",
       "the prompt; -: read it from standard input (as when no prompt is given); repeated: several prompts, decoded "
       "together",
       ""},
      {"file", "f", "FILE", "read the prompt from this file", ""},
      {"escape", "e", "", "process escapes (\\n, \\r, \\t, \\', \\\", \\\\, \\xHH) in the prompt, system prompt and reverse prompts", ""},
      {"prompt-ids", "", "IDS",
       "the prompt as token ids, comma-separated (prints ids when there is no tokenizer); repeated: several prompts", ""},
      {"prompts-file", "", "FILE", "several prompts, one a line, decoded together (each output labelled [i])", ""},
      {"chat", "", "", "interactive chat through the model's chat template; the KV cache is kept across turns", ""},
      {"system-prompt", "sys", "TEXT", "system prompt for --chat", ""},
      {"chat-format", "", "NAME",
       "a built-in chat format instead of a template, for models that ship none: chatml, llama3, gemma, phi3, mistral", ""},
      {"n-predict", "n", "N", "maximum tokens to generate (per turn with --chat); -1: until the context is full", "256"},
      {"reverse-prompt", "r", "STR", "stop before this text (repeatable)", ""},
      {"ignore-eos", "", "", "keep generating after an end-of-sequence token", ""},
      {"no-bos", "", "", "do not start the prompt with the BOS token", ""},
      {"profile", "", "", "after generating, profile 8 more decode steps (GPU time per barrier level, shared by its dispatches, the timestamps' own cost taken off) to stderr", ""},
      GpuLoopOptionSpec(),
  };
  spec.options.insert(spec.options.end(), more.begin(), more.end());
  for (const OptionSpec& o : ChatTemplateOptionSpecs()) spec.options.push_back(o);
  for (const OptionSpec& o : SamplingOptionSpecs()) spec.options.push_back(o);
  for (const OptionSpec& o : BatchOptionSpecs()) spec.options.push_back(o);
  for (OptionSpec& o : spec.options) {
    if (o.name == "model") o.help += " (default: the model shipped in default_model/, default-q8_0.gguf)";
  }
  return spec;
}

void PrintSummary(const runtime::GenerationResult& r, const runtime::SamplingOptions& s) {
  const double prefill_rate = r.prefill_seconds > 0 ? static_cast<double>(r.prompt_tokens) / r.prefill_seconds : 0;
  const size_t decoded = r.tokens.empty() ? 0 : r.tokens.size() - 1;  // the first token comes from prefill
  const double decode_rate = r.decode_seconds > 0 ? static_cast<double>(decoded) / r.decode_seconds : 0;
  std::fprintf(stderr, "prompt: %lld tokens, %.1f tok/s; generated: %zu tokens, %.1f tok/s; stop: %s%s\n",
               static_cast<long long>(r.prompt_tokens), prefill_rate, r.tokens.size(), decode_rate,
               runtime::StopReasonName(r.reason),
               s.temperature > 0 ? absl::StrCat("; seed ", s.seed).c_str() : "");
}

// The per-dispatch profile of up to 8 decode steps after the generated text (where the context
// has room), beside the measured decode step time (0: not measured).
absl::Status PrintProfile(runtime::Engine& e, double measured_step_ns) {
  absl::StatusOr<std::vector<vk::ProfiledStep>> samples = e.ProfileDecodeSteps(8);
  if (!samples.ok()) return samples.status();
  if (samples->empty()) {
    std::fprintf(stderr, "no profile: the context is full\n");
    return absl::OkStatus();
  }
  const runtime::ProfileReport report =
      runtime::MakeProfile(e.decode_graph(), e.decode_plan(), *samples, e.position(), measured_step_ns);
  std::fprintf(stderr, "\n%s", runtime::FormatProfile(report).c_str());
  return absl::OkStatus();
}

// The first error writing standard output (0: none): the generation stops, and the command fails
// with it instead of losing the text silently.
int stdout_error = 0;

void Print(const std::string& text) {
  if (stdout_error != 0) return;
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    stdout_error = errno != 0 ? errno : EIO;
  }
}

absl::Status StdoutStatus() {
  if (stdout_error == 0) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("cannot write the output: ", std::strerror(stdout_error)));
}

// Asked between generated tokens: stop at Ctrl-C, or when the output cannot be written.
bool ShouldStop() { return Interrupted() || stdout_error != 0; }

// A text option as given, or with its escapes processed under -e.
std::string Text(const ParsedArgs& args, const std::string& name) {
  return args.Has("escape") ? ProcessEscapes(args.Get(name)) : args.Get(name);
}

// The prompt text: -p TEXT, -f FILE, or standard input (-p -, or no prompt option).
absl::StatusOr<std::string> PromptText(const ParsedArgs& args) {
  if (args.Has("file")) return ReadTextFile(args.Get("file"));
  if (!args.Has("prompt") || args.Get("prompt") == "-") return ReadStandardInput();
  return Text(args, "prompt");
}

// Prompt ids from the prompt text (encoded, with BOS unless --no-bos) or --prompt-ids.
absl::StatusOr<std::vector<int32_t>> PromptIds(const ParsedArgs& args, const tokenizers::Tokenizer* tok) {
  if (args.Has("prompt-ids")) return args.GetIntList("prompt-ids");
  absl::StatusOr<std::string> text = PromptText(args);
  if (!text.ok()) return text.status();
  absl::StatusOr<std::vector<int32_t>> ids = tok->Encode(*text, /*add_special=*/!args.Has("no-bos"));
  if (!ids.ok()) return ids.status();
  // Some tokenizers (Llama 3's) do not add the BOS their model expects.
  if (!args.Has("no-bos") && tok->bos_id() && (ids->empty() || ids->front() != *tok->bos_id())) {
    ids->insert(ids->begin(), *tok->bos_id());
  }
  return ids;
}

absl::StatusOr<int> Chat(runtime::Engine& engine, const tokenizers::Tokenizer& tok, const ParsedArgs& args,
                         const runtime::GenerationOptions& limits, const runtime::SamplingOptions& sampling) {
  if (!args.Has("chat-format")) {  // the model's own template, or --chat-template's
    absl::StatusOr<std::optional<jinja::Template>> tmpl = LoadChatTemplate(args, &tok);
    if (!tmpl.ok()) return tmpl.status();
    if (!tmpl->has_value()) return absl::NotFoundError(NoChatTemplateMessage(args.Get("model")));
    return TemplateChat(engine, tok, **tmpl, args, limits, Print, [&](const runtime::GenerationResult& r) {
      if (absl::Status s = StdoutStatus(); !s.ok()) return s;
      PrintSummary(r, sampling);
      return absl::OkStatus();
    });
  }
  absl::StatusOr<chat::ChatFormat> format = chat::ChatFormatByName(args.Get("chat-format"));
  if (!format.ok()) return format.status();
  absl::StatusOr<std::vector<int32_t>> eot = tok.Encode(format->end_of_turn, false);
  if (!eot.ok()) return eot.status();
  std::vector<int32_t> bos;
  if (tok.bos_id() && !args.Has("no-bos")) bos.push_back(*tok.bos_id());
  ChatHistory history(*format, tok, Text(args, "system-prompt"), bos, *eot);
  runtime::GenerationOptions turn_limits = limits;
  turn_limits.stop.push_back(format->end_of_turn);
  // A turn is fed only where its reply has room: -n tokens, at most half the context.
  const int64_t reply_room = std::min(limits.max_tokens, engine.context() / 2);
  std::fprintf(stderr, "chat (%s format); an empty line or end of input quits\n", format->name.c_str());
  std::string line;
  while (std::fprintf(stderr, "> "), std::getline(std::cin, line) && !line.empty()) {
    absl::StatusOr<std::vector<int32_t>> ids = history.NextTurn(line);
    if (!ids.ok()) return ids.status();
    if (engine.position() + static_cast<int64_t>(ids->size()) + reply_room > engine.context()) {
      int dropped = 0;
      ids = history.Refeed(line, engine.context() - reply_room, dropped);
      if (!ids.ok()) return ids.status();
      std::fprintf(stderr, "(the context is full: the oldest %d turn%s dropped, the system prompt kept)\n", dropped,
                   dropped == 1 ? " was" : "s were");
      engine.Reset();
    }
    ClearInterrupt();
    absl::StatusOr<runtime::GenerationResult> r = runtime::Generate(engine, tok, *ids, turn_limits, Print);
    if (!r.ok()) return r.status();
    Print("\n");
    if (absl::Status s = StdoutStatus(); !s.ok()) return s;
    PrintSummary(*r, sampling);
    history.Add(line, r->tokens);
  }
  return 0;
}

}  // namespace

absl::StatusOr<int> RunCommand(const std::vector<std::string>& argv) {
  const CommandSpec spec = Spec();
  absl::StatusOr<std::optional<ParsedArgs>> parsed = ParseOrHelp(spec, argv);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->has_value()) return 0;
  if (!(*parsed)->Has("model") && !(*parsed)->Has("synthetic")) {  // the model that ships with doppler
    absl::StatusOr<std::filesystem::path> model = DefaultModel();
    if (!model.ok()) return model.status();
    std::fprintf(stderr, "model: %s (the default; --model PATH chooses another)\n", model->string().c_str());
    std::vector<std::string> with_model = argv;
    with_model.insert(with_model.end(), {"--model", model->string()});
    parsed = ParseOrHelp(spec, with_model);
    if (!parsed.ok()) return parsed.status();
  }
  const ParsedArgs& args = **parsed;
  const bool several = HasSeveralPrompts(args);
  const int modes = several ? 1 + args.Has("file") + args.Has("chat")
                            : args.Has("prompt") + args.Has("file") + args.Has("prompt-ids") + args.Has("chat");
  if (modes > 1) {
    return UsageError("give one of -p TEXT, -f FILE, --prompt-ids IDS, --chat (none: the prompt is read from standard "
                      "input), or several prompts (-p or --prompt-ids repeated, --prompts-file)");
  }
  absl::StatusOr<int64_t> n = args.GetInt("n-predict");
  if (!n.ok()) return n.status();
  if (*n < -1) return absl::InvalidArgumentError("-n, --n-predict must be >= 0, or -1 (until the context is full)");
  absl::StatusOr<runtime::SamplingOptions> sampling = SamplingOptionsFromArgs(args);
  if (!sampling.ok()) return sampling.status();
  absl::StatusOr<runtime::EngineOptions> options = EngineOptionsFromArgs(args);
  if (!options.ok()) return options.status();
  options->sampling = *sampling;
  // Token ids in, token ids out when there is no tokenizer to turn them into text.
  std::unique_ptr<tokenizers::Tokenizer> tokenizer;
  if (!args.Has("prompt-ids") || args.Has("tokenizer") || ModelHasTokenizer(options->model_path)) {
    absl::StatusOr<std::unique_ptr<tokenizers::Tokenizer>> tok = OpenTokenizer(args);
    if (!tok.ok()) return tok.status();
    tokenizer = *std::move(tok);
  }
  if (several) {
    absl::StatusOr<std::vector<std::vector<int32_t>>> prompts = SeveralPromptIds(args, tokenizer.get());
    if (!prompts.ok()) return prompts.status();
    runtime::GenerationOptions limits;
    limits.max_tokens = *n == -1 ? std::numeric_limits<int64_t>::max() : *n;
    for (const std::string& stop : args.GetAll("reverse-prompt")) {
      limits.stop.push_back(args.Has("escape") ? ProcessEscapes(stop) : stop);
    }
    limits.ignore_eos = args.Has("ignore-eos");
    limits.echo_prompt = true;
    limits.interrupted = ShouldStop;
    CatchInterrupts();
    return RunSeveralPrompts(args, *options, tokenizer.get(), *prompts, limits, *sampling);
  }
  absl::StatusOr<std::vector<int32_t>> prompt;
  if (!args.Has("chat")) {
    prompt = PromptIds(args, tokenizer.get());
    if (!prompt.ok()) return prompt.status();
    if (prompt->empty()) return absl::InvalidArgumentError("the prompt is empty");
  }
  absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(*options);
  if (!engine.ok()) return engine.status();
  runtime::Engine& e = **engine;
  if (tokenizer) {
    if (absl::Status s = CheckTokenizerFitsModel(*tokenizer, e.config().vocab_size); !s.ok()) return s;
  }
  runtime::GenerationOptions limits;
  limits.max_tokens = *n == -1 ? e.context() : *n;
  for (const std::string& stop : args.GetAll("reverse-prompt")) {
    limits.stop.push_back(args.Has("escape") ? ProcessEscapes(stop) : stop);
  }
  limits.ignore_eos = args.Has("ignore-eos");
  limits.interrupted = ShouldStop;
  CatchInterrupts();
  if (tokenizer && args.Has("chat")) return Chat(e, *tokenizer, args, limits, *sampling);

  if (static_cast<int64_t>(prompt->size()) > e.context()) {
    return absl::OutOfRangeError(absl::StrCat("the prompt has ", prompt->size(), " tokens, more than the context size ",
                                              e.context(), " (raise it with -c, --ctx-size)"));
  }
  if (!tokenizer) {  // ids in, ids out
    if (limits.max_tokens == 0) return 0;
    absl::StatusOr<int32_t> token = e.Prefill(*prompt);
    if (!token.ok()) return token.status();
    std::vector<int32_t> out = {*token};
    while (static_cast<int64_t>(out.size()) < limits.max_tokens && e.position() < e.context() && !ShouldStop()) {
      absl::StatusOr<std::vector<int32_t>> next = e.DecodeUpTo(limits.max_tokens - static_cast<int64_t>(out.size()));
      if (!next.ok()) return next.status();
      out.insert(out.end(), next->begin(), next->end());
    }
    Print(absl::StrCat(absl::StrJoin(out, " "), "\n"));
    if (absl::Status s = StdoutStatus(); !s.ok()) return s;
    if (args.Has("profile")) {
      if (absl::Status s = PrintProfile(e, 0); !s.ok()) return s;
    }
    return 0;
  }
  limits.echo_prompt = true;
  absl::StatusOr<runtime::GenerationResult> r = runtime::Generate(e, *tokenizer, *prompt, limits, Print);
  if (!r.ok()) return r.status();
  Print("\n");
  if (absl::Status s = StdoutStatus(); !s.ok()) return s;
  PrintSummary(*r, *sampling);
  if (args.Has("profile")) {
    const size_t decoded = r->tokens.empty() ? 0 : r->tokens.size() - 1;
    const double step_ns = decoded > 0 ? r->decode_seconds * 1e9 / static_cast<double>(decoded) : 0;
    if (absl::Status s = PrintProfile(e, step_ns); !s.ok()) return s;
  }
  return 0;
}

}  // namespace doppler::cli
