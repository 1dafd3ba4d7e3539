#include "runtime/generator.h"

#include <algorithm>
#include <chrono>
#include <deque>

#include "runtime/stop_matcher.h"
#include "tokenizers/stream_decoder.h"

namespace doppler::runtime {

const char* StopReasonName(StopReason r) {
  switch (r) {
    case StopReason::kMaxTokens:
      return "token limit";
    case StopReason::kEndOfSequence:
      return "end of sequence";
    case StopReason::kStopString:
      return "stop string";
    case StopReason::kContextFull:
      return "context full";
    case StopReason::kInterrupted:
      return "interrupted";
  }
  return "?";
}

absl::StatusOr<GenerationResult> Generate(Engine& engine, const tokenizers::Tokenizer& tokenizer,
                                          std::span<const int32_t> prompt, const GenerationOptions& options,
                                          const std::function<void(const std::string&)>& emit) {
  using Clock = std::chrono::steady_clock;
  GenerationResult r;
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  if (options.max_tokens <= 0) return r;
  const std::vector<int32_t> eos = tokenizer.eos_ids();
  tokenizers::StreamDecoder decoder(tokenizer);
  StopMatcher stops(options.stop);
  auto show = [&](const std::string& text) {
    if (text.empty()) return;
    r.text += text;
    emit(text);
  };

  if (options.echo_prompt) {
    std::string echoed;
    for (int32_t id : prompt) echoed += decoder.Push(id);
    r.text += echoed;
    emit(echoed);
  }
  const auto t0 = Clock::now();
  absl::StatusOr<int32_t> token = engine.Prefill(prompt);
  if (!token.ok()) return token.status();
  const auto t1 = Clock::now();
  r.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  // Tokens the GPU decode loop produced ahead of the one being looked at (the engine has fed all but
  // the last of them): on a stop the engine is taken back to just after `token`.
  std::deque<int32_t> ahead;
  while (true) {
    r.pending_token = *token;
    if (!options.ignore_eos && std::find(eos.begin(), eos.end(), *token) != eos.end()) {
      r.reason = StopReason::kEndOfSequence;
      break;
    }
    r.tokens.push_back(*token);
    show(stops.Push(decoder.Push(*token)));
    if (stops.stopped()) {
      r.reason = StopReason::kStopString;
      break;
    }
    if (static_cast<int64_t>(r.tokens.size()) >= options.max_tokens) {
      r.reason = StopReason::kMaxTokens;
      break;
    }
    if (engine.position() - static_cast<int64_t>(ahead.size()) >= engine.context()) {
      r.reason = StopReason::kContextFull;
      break;
    }
    if (options.interrupted && options.interrupted()) {
      r.reason = StopReason::kInterrupted;
      break;
    }
    if (ahead.empty()) {
      absl::StatusOr<std::vector<int32_t>> next =
          engine.DecodeUpTo(options.max_tokens - static_cast<int64_t>(r.tokens.size()));
      if (!next.ok()) return next.status();
      ahead.assign(next->begin(), next->end());
    }
    token = ahead.front();
    ahead.pop_front();
  }
  if (!ahead.empty()) {
    if (absl::Status s = engine.Rewind(engine.position() - static_cast<int64_t>(ahead.size()), r.pending_token); !s.ok()) {
      return s;
    }
  }
  if (!stops.stopped()) {
    show(stops.Push(decoder.Flush()));
    show(stops.Flush());
  }
  r.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return r;
}

}  // namespace doppler::runtime
