// doppler perplexity: perplexity of a text file over windows of --ctx-size tokens.
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/perplexity.h"
#include "tools/cli_engine.h"
#include "tools/cli_prompt_text.h"
#include "tools/commands.h"

namespace doppler::cli {
namespace {

CommandSpec Spec() {
  CommandSpec spec{"perplexity",
                   "Perplexity of a text file, measured as llama.cpp does: the tokens are cut into windows of\n"
                   "--ctx-size tokens, each evaluated from an empty cache (first token replaced by BOS), and the second\n"
                   "half of every window is scored. Prints the running value after each window, then the result.",
                   EngineOptionSpecs()};
  spec.options.push_back({"file", "f", "FILE", "the text to score", ""});
  for (OptionSpec& o : spec.options) {
    if (o.name == "ctx-size") o.help = "window size in tokens (also the context size)", o.default_value = "512";
  }
  return spec;
}

}  // namespace

absl::StatusOr<int> PerplexityCommand(const std::vector<std::string>& argv) {
  const CommandSpec spec = Spec();
  absl::StatusOr<std::optional<ParsedArgs>> parsed = ParseOrHelp(spec, argv);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->has_value()) return 0;
  const ParsedArgs& args = **parsed;
  if (!args.Has("file")) return UsageError("-f, --file FILE is required");
  absl::StatusOr<std::string> text = ReadTextFile(args.Get("file"));
  if (!text.ok()) return text.status();
  absl::StatusOr<int64_t> window = args.GetInt("ctx-size");
  if (!window.ok()) return window.status();
  absl::StatusOr<runtime::EngineOptions> options = EngineOptionsFromArgs(args);
  if (!options.ok()) return options.status();
  options->gpu_loop = 1;  // scoring only: no decoding
  options->context = *window;
  options->prefill_chunk = *window;
  absl::StatusOr<std::unique_ptr<tokenizers::Tokenizer>> tok = OpenTokenizer(args);
  if (!tok.ok()) return tok.status();
  absl::StatusOr<std::vector<int32_t>> ids = (*tok)->Encode(*text, /*add_special=*/false);
  if (!ids.ok()) return ids.status();
  absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(*options);
  if (!engine.ok()) return engine.status();
  std::fprintf(stderr, "%zu tokens, %zu windows of %lld\n", ids->size(), ids->size() / static_cast<size_t>(*window),
               static_cast<long long>(*window));
  absl::StatusOr<runtime::PerplexityResult> r =
      runtime::Perplexity(**engine, *ids, *window, (*tok)->bos_id(), [](int64_t w, double ppl) {
        std::printf("[%lld] %.4f\n", static_cast<long long>(w + 1), ppl);
        std::fflush(stdout);
      });
  if (!r.ok()) return r.status();
  std::printf("perplexity: %.4f +/- %.4f over %lld tokens in %lld windows\n", r->perplexity, r->stderr_perplexity,
              static_cast<long long>(r->scored_tokens), static_cast<long long>(r->windows));
  return 0;
}

}  // namespace doppler::cli
