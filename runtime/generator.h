// Text generation on top of the engine: feed a prompt, decode token by token, stream the text,
// stop at an end-of-sequence token, a stop string, the token limit or a full context.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/engine.h"
#include "tokenizers/tokenizer.h"

namespace doppler::runtime {

struct GenerationOptions {
  int64_t max_tokens = 256;
  std::vector<std::string> stop;  // stop strings: generation ends before the first one
  bool ignore_eos = false;
  // Emit the prompt's text first, through the same decoder as the generation, so the two join
  // exactly as the whole sequence decodes.
  bool echo_prompt = false;
  // Asked between steps: true ends the generation (Ctrl-C, or output that can no longer be written).
  std::function<bool()> interrupted;
};

enum class StopReason { kMaxTokens, kEndOfSequence, kStopString, kContextFull, kInterrupted };
const char* StopReasonName(StopReason r);

struct GenerationResult {
  int64_t prompt_tokens = 0;
  std::vector<int32_t> tokens;  // generated ids; an end-of-sequence id is not included
  std::string text;             // what was emitted
  StopReason reason = StopReason::kMaxTokens;
  double prefill_seconds = 0.0, decode_seconds = 0.0;
  // The token that ended generation (an end-of-sequence id, or the last one generated) was
  // chosen but not fed to the model: a conversation's next turn feeds it first.
  int32_t pending_token = -1;
};

// Feeds `prompt` at the engine's position and generates. `emit` receives the text as it becomes
// final: never half a UTF-8 character, never a piece of a stop string.
absl::StatusOr<GenerationResult> Generate(Engine& engine, const tokenizers::Tokenizer& tokenizer,
                                          std::span<const int32_t> prompt, const GenerationOptions& options,
                                          const std::function<void(const std::string&)>& emit);

}  // namespace doppler::runtime
