// doppler run: greedy generation from prompt token ids.
#include <chrono>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tools/cli_engine.h"
#include "tools/commands.h"

namespace doppler::cli {
namespace {

CommandSpec Spec() {
  CommandSpec spec{"run",
                   "Generate tokens greedily from a prompt given as token ids; prints the generated ids.\n"
                   "Text prompts and sampling (temperature > 0) are not supported yet.",
                   EngineOptionSpecs()};
  spec.options.push_back({"prompt-ids", "", "IDS", "prompt token ids, comma-separated (e.g. 1,2,3)", ""});
  spec.options.push_back({"n", "n", "N", "number of tokens to generate", "32"});
  spec.options.push_back({"temperature", "t", "T", "sampling temperature; only 0 (greedy) is supported", "0"});
  return spec;
}

}  // namespace

absl::StatusOr<int> RunCommand(const std::vector<std::string>& argv) {
  const CommandSpec spec = Spec();
  absl::StatusOr<std::optional<ParsedArgs>> parsed = ParseOrHelp(spec, argv);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->has_value()) return 0;
  const ParsedArgs* args = &**parsed;
  absl::StatusOr<double> temperature = args->GetFloat("temperature");
  if (!temperature.ok()) return temperature.status();
  if (*temperature != 0.0) {
    return absl::UnimplementedError("--temperature: only 0 (greedy decoding) is supported in this version");
  }
  if (!args->Has("prompt-ids")) return absl::InvalidArgumentError("--prompt-ids is required");
  absl::StatusOr<std::vector<int32_t>> prompt = args->GetIntList("prompt-ids");
  if (!prompt.ok()) return prompt.status();
  if (prompt->empty()) return absl::InvalidArgumentError("--prompt-ids is empty");
  absl::StatusOr<int64_t> n = args->GetInt("n");
  if (!n.ok()) return n.status();
  if (*n < 0) return absl::InvalidArgumentError("-n must be >= 0");
  absl::StatusOr<runtime::EngineOptions> options = EngineOptionsFromArgs(*args);
  if (!options.ok()) return options.status();
  absl::StatusOr<std::unique_ptr<runtime::Engine>> engine = runtime::Engine::Create(*options);
  if (!engine.ok()) return engine.status();
  runtime::Engine& e = **engine;
  if (static_cast<int64_t>(prompt->size()) + *n > e.context()) {
    return absl::OutOfRangeError(absl::StrCat("prompt (", prompt->size(), " tokens) + -n ", *n,
                                              " exceeds the context size ", e.context(), " (raise it with --ctx)"));
  }
  if (*n == 0) return 0;

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  absl::StatusOr<int32_t> token = e.Prefill(*prompt);
  if (!token.ok()) return token.status();
  const auto t1 = Clock::now();
  std::printf("%d", *token);
  std::fflush(stdout);
  for (int64_t i = 1; i < *n; ++i) {
    token = e.DecodeNext();
    if (!token.ok()) return token.status();
    std::printf(" %d", *token);
    std::fflush(stdout);
  }
  std::printf("\n");
  std::fflush(stdout);
  const auto t2 = Clock::now();
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  std::fprintf(stderr, "prompt: %zu tokens, %.1f tok/s; generated: %lld tokens, %.1f tok/s\n", prompt->size(),
               static_cast<double>(prompt->size()) / prefill_s, static_cast<long long>(*n),
               *n > 1 ? static_cast<double>(*n - 1) / decode_s : 0.0);
  return 0;
}

}  // namespace doppler::cli
