// Batched generation on the command line: `doppler run` with several prompts, and the options
// that size the batched engine (shared with `doppler bench --batch` and `doppler serve`).
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/batch_engine.h"
#include "runtime/generator.h"
#include "tokenizers/tokenizer.h"
#include "tools/cli_args.h"

namespace doppler::cli {

// -np/--parallel, --ctx-total, --kv-page.
std::vector<OptionSpec> BatchOptionSpecs();
absl::StatusOr<runtime::BatchOptions> BatchOptionsFromArgs(const ParsedArgs& args);

// Whether `doppler run` was given several prompts: -p or --prompt-ids more than once, or
// --prompts-file.
bool HasSeveralPrompts(const ParsedArgs& args);

// The prompts as ids: every -p (encoded as run encodes one), every --prompt-ids, and every
// non-empty line of --prompts-file (escapes processed under -e).
absl::StatusOr<std::vector<std::vector<int32_t>>> SeveralPromptIds(const ParsedArgs& args,
                                                                   const tokenizers::Tokenizer* tokenizer);

// Decodes the prompts as one batch and prints each sequence's output on its own lines, labelled
// "[i] " by the prompt's index, in prompt order; a summary goes to stderr.
absl::StatusOr<int> RunSeveralPrompts(const ParsedArgs& args, const runtime::EngineOptions& options,
                                      const tokenizers::Tokenizer* tokenizer,
                                      const std::vector<std::vector<int32_t>>& prompts,
                                      const runtime::GenerationOptions& limits, const runtime::SamplingOptions& sampling);

}  // namespace doppler::cli
