// Several prompts generated together through the batched engine: each sequence stops on its own
// (end of sequence, a stop string, its token limit) and leaves the batch, the others go on.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/batch_engine.h"
#include "runtime/generator.h"
#include "runtime/token_choice.h"
#include "tokenizers/tokenizer.h"

namespace doppler::runtime {

struct BatchResult {
  std::vector<int32_t> tokens;  // generated ids; an end-of-sequence id is not included
  std::string text;             // the generation's text (with a tokenizer; after the prompt's with echo_prompt)
  StopReason reason = StopReason::kMaxTokens;
};

struct BatchGenerationStats {
  int64_t prompt_tokens = 0, generated_tokens = 0, steps = 0;
  double seconds = 0.0;
};

// Generates after every prompt (options.max_tokens each; options.stop and EOS with a tokenizer,
// which may be null: ids only). Tokens are greedy, or drawn on the host with `sampling` (sequence
// i seeded with sampling.seed + i, so a sequence's draws do not depend on its neighbours).
absl::StatusOr<std::vector<BatchResult>> GenerateBatch(BatchEngine& engine, const tokenizers::Tokenizer* tokenizer,
                                                       const std::vector<std::vector<int32_t>>& prompts,
                                                       const GenerationOptions& options,
                                                       const SamplingOptions& sampling,
                                                       BatchGenerationStats* stats = nullptr);

}  // namespace doppler::runtime
