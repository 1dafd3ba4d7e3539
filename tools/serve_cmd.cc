// doppler serve: the OpenAI-compatible HTTP server (serve/), with the web chat page at /.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chat/chat_format.h"
#include "serve/batch_scheduler.h"
#include "serve/http_server.h"
#include "tools/cli_batch.h"
#include "tools/cli_chat_template.h"
#include "tools/cli_engine.h"
#include "tools/commands.h"

namespace doppler::cli {
namespace {

CommandSpec Spec() {
  CommandSpec spec{"serve",
                   "Serve a model over OpenAI's HTTP API (/v1/chat/completions, /v1/completions, /v1/models), with\n"
                   "/health, /metrics (Prometheus), /tokenize, /detokenize and a web chat page at /. SIGTERM drains and exits.",
                   EngineOptionSpecs()};
  const std::vector<OptionSpec> more = {
      {"host", "", "ADDR", "address to listen on (0.0.0.0: every interface)", "127.0.0.1"},
      {"port", "", "N", "port to listen on (0: any free port, printed at start)", "8080"},
      {"max-queue", "", "N", "requests that may wait beyond those running; more get 429", "64"},
      {"threads-http", "", "N",
       "HTTP threads: connections served at once, each streaming, waiting or idle between keep-alive "
       "requests (up to 5 s); more wait to be read (default: --parallel + --max-queue + 16)",
       ""},
      {"api-key", "", "KEY", "require 'Authorization: Bearer KEY' on the API routes", ""},
      {"alias", "a", "NAME", "the model name /v1/models reports (default: the model file's name)", ""},
      {"chat-format", "", "NAME",
       "a built-in chat format instead of a chat template: chatml, llama3, gemma, phi3, mistral "
       "(a model without a template gets chatml)",
       ""},
      {"max-body", "", "BYTES", "largest request body; larger ones get 413", "8388608"},
      {"drain-timeout", "", "SECONDS", "on SIGTERM, how long running requests may take to finish", "30"},
  };
  spec.options.insert(spec.options.end(), more.begin(), more.end());
  for (const OptionSpec& o : BatchOptionSpecs()) spec.options.push_back(o);
  const std::vector<OptionSpec> chat_template = ChatTemplateOptionSpecs();
  spec.options.insert(spec.options.end(), chat_template.begin(), chat_template.end());
  for (OptionSpec& o : spec.options) {
    if (o.name == "model") o.help += " (default: the model shipped in default_model/, default-q8_0.gguf)";
  }
  return spec;
}

absl::StatusOr<int64_t> IntInRange(const ParsedArgs& args, const std::string& name, int64_t lo, int64_t hi) {
  absl::StatusOr<int64_t> v = args.GetInt(name);
  if (!v.ok()) return v.status();
  if (*v < lo || *v > hi) return UsageError(absl::StrCat("--", name, " must be between ", lo, " and ", hi));
  return v;
}

// Chat prompts through --chat-template FILE or the model's own template, as `run --chat` renders
// them; a built-in format only when asked for (--chat-format) or when the model ships no template.
// `description` says which, for the log.
absl::StatusOr<serve::ChatPromptOptions> ChatPromptOptionsOf(const ParsedArgs& args, const tokenizers::Tokenizer* tokenizer,
                                                             std::string& description) {
  serve::ChatPromptOptions chat;
  if (tokenizer) chat.special_tokens = SpecialTokensOf(*tokenizer);
  absl::StatusOr<jinja::Dict> kwargs = ChatTemplateKwargs(args);
  if (!kwargs.ok()) return kwargs.status();
  chat.kwargs = *std::move(kwargs);
  if (!args.Has("chat-format")) {
    absl::StatusOr<std::optional<jinja::Template>> tmpl = LoadChatTemplate(args, tokenizer);
    if (!tmpl.ok()) return tmpl.status();
    if (tmpl->has_value()) {
      chat.chat_template = std::make_shared<const jinja::Template>(**std::move(tmpl));
      description = args.Has("chat-template") ? absl::StrCat("chat template ", args.Get("chat-template"))
                                              : "the model's chat template";
      return chat;
    }
    if (tokenizer) {
      std::fprintf(stderr, "serve: %s; chat prompts use the built-in format chatml\n",
                   NoChatTemplateMessage(args.Get("model")).c_str());
    }
  }
  absl::StatusOr<chat::ChatFormat> format = chat::ChatFormatByName(args.Has("chat-format") ? args.Get("chat-format") : "chatml");
  if (!format.ok()) return format.status();
  chat.format = *std::move(format);
  description = absl::StrCat("built-in chat format ", chat.format.name);
  return chat;
}

}  // namespace

absl::StatusOr<int> ServeCommand(const std::vector<std::string>& argv) {
  const CommandSpec spec = Spec();
  absl::StatusOr<std::optional<ParsedArgs>> parsed = ParseOrHelp(spec, argv);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->has_value()) return 0;
  if (!(*parsed)->Has("model") && !(*parsed)->Has("synthetic")) {  // the model that ships with doppler
    absl::StatusOr<std::filesystem::path> model = DefaultModel();
    if (!model.ok()) return model.status();
    std::vector<std::string> with_model = argv;
    with_model.insert(with_model.end(), {"--model", model->string()});
    parsed = ParseOrHelp(spec, with_model);
    if (!parsed.ok()) return parsed.status();
  }
  const ParsedArgs& args = **parsed;
  absl::StatusOr<int64_t> port = IntInRange(args, "port", 0, 65535);
  if (!port.ok()) return port.status();
  absl::StatusOr<runtime::BatchOptions> batch = BatchOptionsFromArgs(args);
  if (!batch.ok()) return batch.status();
  absl::StatusOr<int64_t> max_queue = IntInRange(args, "max-queue", 0, 1 << 20);
  if (!max_queue.ok()) return max_queue.status();
  // A connection holds a thread while it streams or waits: by default room for every running and
  // waiting request, and some for probes, /metrics and the page.
  int64_t http_threads = batch->max_sequences + *max_queue + 16;
  if (args.Has("threads-http")) {
    absl::StatusOr<int64_t> threads = IntInRange(args, "threads-http", 1, 65536);
    if (!threads.ok()) return threads.status();
    http_threads = *threads;
  }
  absl::StatusOr<int64_t> max_body = IntInRange(args, "max-body", 1024, int64_t{1} << 32);
  if (!max_body.ok()) return max_body.status();
  absl::StatusOr<int64_t> drain = IntInRange(args, "drain-timeout", 0, 24 * 3600);
  if (!drain.ok()) return drain.status();
  absl::StatusOr<runtime::EngineOptions> options = EngineOptionsFromArgs(args);
  if (!options.ok()) return options.status();
  if (args.Has("chat-format") && args.Has("chat-template")) {
    return absl::InvalidArgumentError("give --chat-template or --chat-format, not both");
  }

  // SIGTERM and SIGINT are taken by sigwait below, in this thread: blocked before any thread starts,
  // so that every thread inherits the mask. A client that goes away must not kill the server.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  serve::Metrics metrics;
  serve::HttpOptions http;
  http.host = args.Get("host");
  http.port = static_cast<int>(*port);
  http.api_key = args.Get("api-key");
  http.max_body_bytes = static_cast<size_t>(*max_body);
  http.threads = static_cast<int>(http_threads);
  serve::HttpServer server(http, metrics);
  if (absl::Status s = server.Start(); !s.ok()) return s;
  std::fprintf(stderr, "serve: listening on http://%s:%d (loading the model; %d HTTP threads)\n", http.host.c_str(),
               server.port(), http.threads);

  std::unique_ptr<tokenizers::Tokenizer> tokenizer;
  if (args.Has("tokenizer") || (!args.Has("synthetic") && ModelHasTokenizer(options->model_path))) {
    absl::StatusOr<std::unique_ptr<tokenizers::Tokenizer>> tok = OpenTokenizer(args);
    if (!tok.ok()) return tok.status();
    tokenizer = *std::move(tok);
  }
  std::string chat_description;
  absl::StatusOr<serve::ChatPromptOptions> chat = ChatPromptOptionsOf(args, tokenizer.get(), chat_description);
  if (!chat.ok()) return chat.status();
  absl::StatusOr<std::unique_ptr<runtime::BatchEngine>> engine = runtime::BatchEngine::Create(*options, *batch);
  if (!engine.ok()) return engine.status();
  // Every plan a request may need, compiled and run once before the first one arrives.
  if (absl::Status s = (*engine)->Prepare(batch->max_sequences, /*serving=*/true); !s.ok()) return s;

  serve::ModelInfo model;
  model.id = args.Has("alias")       ? args.Get("alias")
             : args.Has("synthetic") ? args.Get("synthetic")
                                     : options->model_path.filename().string();
  model.tokenizer = tokenizer.get();
  model.chat = *std::move(chat);
  model.context = (*engine)->context();
  model.vocab_size = static_cast<int32_t>((*engine)->config().vocab_size);
  serve::BatchScheduler scheduler(**engine, tokenizer.get(), *max_queue, &metrics);
  server.SetReady(&scheduler, model);
  std::fprintf(stderr, "serve: ready: %s, context %lld, up to %d sequences at once, KV pool of %lld tokens, %s%s\n",
               model.id.c_str(), static_cast<long long>(model.context), batch->max_sequences,
               static_cast<long long>((*engine)->pool_pages() * (*engine)->page_rows()), chat_description.c_str(),
               tokenizer ? "" : " (no tokenizer: prompts as token ids to /v1/completions)");

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  std::fprintf(stderr, "serve: %s: draining (at most %lld s)\n", signal_number == SIGTERM ? "SIGTERM" : "SIGINT",
               static_cast<long long>(*drain));
  server.SetDraining();
  scheduler.StopAccepting();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(*drain);
  auto left = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  };
  const bool idle = scheduler.WaitIdle(left()) && server.WaitResponses(left());
  if (!idle) {
    scheduler.CancelAll();  // each ends at its next token
    scheduler.WaitIdle(std::chrono::seconds(10));
    server.WaitResponses(std::chrono::seconds(2));
  }
  server.Stop();
  std::fprintf(stderr, "serve: stopped%s\n", idle ? "" : " (requests still running were cancelled)");
  return 0;
}

}  // namespace doppler::cli
