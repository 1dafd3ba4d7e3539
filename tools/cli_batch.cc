#include "tools/cli_batch.h"

#include <cstdio>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "runtime/batch_generator.h"
#include "tools/cli_prompt_text.h"

namespace doppler::cli {

std::vector<OptionSpec> BatchOptionSpecs() {
  return {
      {"parallel", "np", "N", "sequences decoded together at most (the largest batch)", "16"},
      {"ctx-total", "", "N",
       "tokens the KV cache holds across all sequences (0: --parallel full contexts, as far as the device's memory "
       "allows, at least one context)",
       "0"},
      {"kv-page", "", "N", "rows of a KV cache page (prefix sharing is by whole pages)", "16"},
      {"batch-size", "b", "N",
       "prompt tokens prefilled a step at most, across the sequences reading their prompts (at least one chunk); "
       "more starts a burst of requests sooner and pauses the running ones longer",
       absl::StrCat(runtime::BatchOptions{}.prefill_budget)},
  };
}

absl::StatusOr<runtime::BatchOptions> BatchOptionsFromArgs(const ParsedArgs& args) {
  runtime::BatchOptions o;
  absl::StatusOr<int64_t> parallel = args.GetInt("parallel");
  if (!parallel.ok()) return parallel.status();
  if (*parallel < 1 || *parallel > 1024) return UsageError("-np, --parallel must be 1..1024");
  o.max_sequences = static_cast<int>(*parallel);
  absl::StatusOr<int64_t> total = args.GetInt("ctx-total");
  if (!total.ok()) return total.status();
  if (*total < 0) return UsageError("--ctx-total must be >= 0");
  o.ctx_total = *total;
  absl::StatusOr<int64_t> page = args.GetInt("kv-page");
  if (!page.ok()) return page.status();
  if (*page < 1 || *page > 4096) return UsageError("--kv-page must be 1..4096");
  o.page_rows = *page;
  absl::StatusOr<int64_t> budget = args.GetInt("batch-size");
  if (!budget.ok()) return budget.status();
  if (*budget < 1 || *budget > (int64_t{1} << 30)) return UsageError("-b, --batch-size must be 1..2^30 tokens");
  o.prefill_budget = *budget;
  return o;
}

bool HasSeveralPrompts(const ParsedArgs& args) {
  return args.GetAll("prompt").size() > 1 || args.GetAll("prompt-ids").size() > 1 || args.Has("prompts-file");
}

absl::StatusOr<std::vector<std::vector<int32_t>>> SeveralPromptIds(const ParsedArgs& args,
                                                                   const tokenizers::Tokenizer* tokenizer) {
  std::vector<std::string> texts;
  for (const std::string& p : args.GetAll("prompt")) texts.push_back(args.Has("escape") ? ProcessEscapes(p) : p);
  if (args.Has("prompts-file")) {
    absl::StatusOr<std::string> file = ReadTextFile(args.Get("prompts-file"));
    if (!file.ok()) return file.status();
    std::istringstream lines(*file);
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty()) texts.push_back(args.Has("escape") ? ProcessEscapes(line) : line);
    }
  }
  std::vector<std::vector<int32_t>> prompts;
  if (!texts.empty() && tokenizer == nullptr) return absl::FailedPreconditionError("text prompts need a tokenizer");
  for (const std::string& text : texts) {
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode(text, /*add_special=*/!args.Has("no-bos"));
    if (!ids.ok()) return ids.status();
    if (!args.Has("no-bos") && tokenizer->bos_id() && (ids->empty() || ids->front() != *tokenizer->bos_id())) {
      ids->insert(ids->begin(), *tokenizer->bos_id());
    }
    prompts.push_back(*std::move(ids));
  }
  for (const std::string& list : args.GetAll("prompt-ids")) {
    std::vector<int32_t> ids;
    for (absl::string_view item : absl::StrSplit(list, ',')) {
      int32_t id;
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(item), &id)) return UsageError(absl::StrCat("--prompt-ids: '", item, "' is not a token id"));
      ids.push_back(id);
    }
    prompts.push_back(std::move(ids));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) return absl::InvalidArgumentError(absl::StrCat("prompt ", i, " is empty"));
  }
  if (prompts.empty()) return absl::InvalidArgumentError("--prompts-file holds no prompt");
  return prompts;
}

absl::StatusOr<int> RunSeveralPrompts(const ParsedArgs& args, const runtime::EngineOptions& options,
                                      const tokenizers::Tokenizer* tokenizer,
                                      const std::vector<std::vector<int32_t>>& prompts,
                                      const runtime::GenerationOptions& limits, const runtime::SamplingOptions& sampling) {
  absl::StatusOr<runtime::BatchOptions> batch = BatchOptionsFromArgs(args);
  if (!batch.ok()) return batch.status();
  absl::StatusOr<std::unique_ptr<runtime::BatchEngine>> engine = runtime::BatchEngine::Create(options, *batch);
  if (!engine.ok()) return engine.status();
  runtime::BatchGenerationStats stats;
  absl::StatusOr<std::vector<runtime::BatchResult>> results =
      runtime::GenerateBatch(**engine, tokenizer, prompts, limits, sampling, &stats);
  if (!results.ok()) return results.status();
  for (size_t i = 0; i < results->size(); ++i) {
    const runtime::BatchResult& r = (*results)[i];
    const std::string body = tokenizer ? r.text : absl::StrJoin(r.tokens, " ");
    std::printf("[%zu] %s\n", i, body.c_str());
  }
  if (std::fflush(stdout) != 0) return absl::UnavailableError("cannot write the output");
  std::fprintf(stderr, "%zu sequences (at most %d at once): prompts %lld tokens, generated %lld tokens in %lld steps, "
               "%.1f s, %.1f tok/s generated; prefix pages shared: %lld tokens\n",
               prompts.size(), batch->max_sequences, static_cast<long long>(stats.prompt_tokens),
               static_cast<long long>(stats.generated_tokens), static_cast<long long>(stats.steps), stats.seconds,
               stats.seconds > 0 ? static_cast<double>(stats.generated_tokens) / stats.seconds : 0.0,
               static_cast<long long>((*engine)->shared_prompt_tokens()));
  return 0;
}

}  // namespace doppler::cli
