// doppler run: generation from a text prompt (streamed), from token ids, or as a chat.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "models/chat_format.h"
#include "runtime/generator.h"
#include "runtime/profile.h"
#include "tools/cli_chat_template.h"
#include "tools/cli_engine.h"
#include "tools/commands.h"

namespace doppler::cli {
namespace {

CommandSpec Spec() {
  CommandSpec spec{"run",
                   "Generate text from a prompt (-p), from prompt token ids (--prompt-ids), or chat (--chat).\n"
                   "The prompt is echoed, then the generation streams as it is produced; a summary goes to stderr.",
                   EngineOptionSpecs()};
  const std::vector<OptionSpec> more = {
      {"prompt", "p", "TEXT", "the prompt", ""},
      {"prompt-ids", "", "IDS", "the prompt as token ids, comma-separated (prints ids when there is no tokenizer)", ""},
      {"chat", "", "", "interactive chat through the model's chat template; the KV cache is kept across turns", ""},
      {"system", "", "TEXT", "system prompt for --chat", ""},
      {"chat-format", "", "NAME",
       "a built-in chat format instead of a template, for models that ship none: chatml, llama3, gemma, phi3, mistral", ""},
      {"n", "n", "N", "maximum tokens to generate (per turn with --chat)", "256"},
      {"stop", "", "STR", "stop before this text (repeatable)", ""},
      {"ignore-eos", "", "", "keep generating after an end-of-sequence token", ""},
      {"no-bos", "", "", "do not start the prompt with the BOS token", ""},
      {"profile", "", "", "after generating, profile 8 more decode steps (GPU time per barrier level, shared by its dispatches, the timestamps' own cost taken off) to stderr", ""},
      GpuLoopOptionSpec(),
  };
  spec.options.insert(spec.options.end(), more.begin(), more.end());
  for (const OptionSpec& o : ChatTemplateOptionSpecs()) spec.options.push_back(o);
  for (const OptionSpec& o : SamplingOptionSpecs()) spec.options.push_back(o);
  for (OptionSpec& o : spec.options) {
    if (o.name == "model") o.help += " (default: the model shipped in models/default/, default-q8_0.gguf)";
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

void Print(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

// Prompt ids from -p (encoded, with BOS unless --no-bos) or --prompt-ids.
absl::StatusOr<std::vector<int32_t>> PromptIds(const ParsedArgs& args, const models::Tokenizer* tok) {
  if (args.Has("prompt-ids")) return args.GetIntList("prompt-ids");
  absl::StatusOr<std::vector<int32_t>> ids = tok->Encode(args.Get("prompt"), /*add_special=*/!args.Has("no-bos"));
  if (!ids.ok()) return ids.status();
  // Some tokenizers (Llama 3's) do not add the BOS their model expects.
  if (!args.Has("no-bos") && tok->bos_id() && (ids->empty() || ids->front() != *tok->bos_id())) {
    ids->insert(ids->begin(), *tok->bos_id());
  }
  return ids;
}

absl::StatusOr<int> Chat(runtime::Engine& engine, const models::Tokenizer& tok, const ParsedArgs& args,
                         const runtime::GenerationOptions& limits, const runtime::SamplingOptions& sampling) {
  if (!args.Has("chat-format")) {  // the model's own template, or --chat-template's
    absl::StatusOr<std::optional<jinja::Template>> tmpl = LoadChatTemplate(args, &tok);
    if (!tmpl.ok()) return tmpl.status();
    if (!tmpl->has_value()) return absl::NotFoundError(NoChatTemplateMessage(args.Get("model")));
    return TemplateChat(engine, tok, **tmpl, args, limits, Print,
                        [&](const runtime::GenerationResult& r) { PrintSummary(r, sampling); });
  }
  absl::StatusOr<models::ChatFormat> format = models::ChatFormatByName(args.Get("chat-format"));
  if (!format.ok()) return format.status();
  std::vector<int32_t> end_of_turn_ids;
  absl::StatusOr<std::vector<int32_t>> eot = tok.Encode(format->end_of_turn, false);
  if (!eot.ok()) return eot.status();
  runtime::GenerationOptions turn_limits = limits;
  turn_limits.stop.push_back(format->end_of_turn);
  std::fprintf(stderr, "chat (%s format); an empty line or end of input quits\n", format->name.c_str());
  bool first = true;
  std::string line;
  while (std::fprintf(stderr, "> "), std::getline(std::cin, line) && !line.empty()) {
    std::string text = format->UserTurn(line, args.Get("system"), first);
    absl::StatusOr<std::vector<int32_t>> ids = tok.Encode(text, false);
    if (!ids.ok()) return ids.status();
    // The previous reply's end is fed with this turn: its closing tokens were chosen, not fed.
    if (first && tok.bos_id() && !args.Has("no-bos")) ids->insert(ids->begin(), *tok.bos_id());
    if (!first) ids->insert(ids->begin(), eot->begin(), eot->end());
    absl::StatusOr<runtime::GenerationResult> r = runtime::Generate(engine, tok, *ids, turn_limits, Print);
    if (!r.ok()) return r.status();
    Print("\n");
    PrintSummary(*r, sampling);
    first = false;
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
  const int modes = args.Has("prompt") + args.Has("prompt-ids") + args.Has("chat");
  if (modes != 1) return absl::InvalidArgumentError("give exactly one of -p TEXT, --prompt-ids IDS, --chat");
  absl::StatusOr<int64_t> n = args.GetInt("n");
  if (!n.ok()) return n.status();
  if (*n < 0) return absl::InvalidArgumentError("-n must be >= 0");
  absl::StatusOr<runtime::SamplingOptions> sampling = SamplingOptionsFromArgs(args);
  if (!sampling.ok()) return sampling.status();
  absl::StatusOr<runtime::EngineOptions> options = EngineOptionsFromArgs(args);
  if (!options.ok()) return options.status();
  options->sampling = *sampling;
  // Token ids in, token ids out when there is no tokenizer to turn them into text.
  std::unique_ptr<models::Tokenizer> tokenizer;
  if (!args.Has("prompt-ids") || args.Has("tokenizer") || ModelHasTokenizer(options->model_path)) {
    absl::StatusOr<std::unique_ptr<models::Tokenizer>> tok = OpenTokenizer(args);
    if (!tok.ok()) return tok.status();
    tokenizer = *std::move(tok);
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
  runtime::GenerationOptions limits;
  limits.max_tokens = *n;
  limits.stop = args.GetAll("stop");
  limits.ignore_eos = args.Has("ignore-eos");
  if (tokenizer && args.Has("chat")) return Chat(e, *tokenizer, args, limits, *sampling);

  if (static_cast<int64_t>(prompt->size()) > e.context()) {
    return absl::OutOfRangeError(absl::StrCat("the prompt has ", prompt->size(), " tokens, more than the context size ",
                                              e.context(), " (raise it with --ctx)"));
  }
  if (!tokenizer) {  // ids in, ids out
    if (*n == 0) return 0;
    absl::StatusOr<int32_t> token = e.Prefill(*prompt);
    if (!token.ok()) return token.status();
    std::vector<int32_t> out = {*token};
    while (static_cast<int64_t>(out.size()) < *n && e.position() < e.context()) {
      absl::StatusOr<std::vector<int32_t>> next = e.DecodeUpTo(*n - static_cast<int64_t>(out.size()));
      if (!next.ok()) return next.status();
      out.insert(out.end(), next->begin(), next->end());
    }
    Print(absl::StrCat(absl::StrJoin(out, " "), "\n"));
    if (args.Has("profile")) {
      if (absl::Status s = PrintProfile(e, 0); !s.ok()) return s;
    }
    return 0;
  }
  limits.echo_prompt = true;
  absl::StatusOr<runtime::GenerationResult> r = runtime::Generate(e, *tokenizer, *prompt, limits, Print);
  if (!r.ok()) return r.status();
  Print("\n");
  PrintSummary(*r, *sampling);
  if (args.Has("profile")) {
    const size_t decoded = r->tokens.empty() ? 0 : r->tokens.size() - 1;
    const double step_ns = decoded > 0 ? r->decode_seconds * 1e9 / static_cast<double>(decoded) : 0;
    if (absl::Status s = PrintProfile(e, step_ns); !s.ok()) return s;
  }
  return 0;
}

}  // namespace doppler::cli
