// One request as the engine sees it: the prompt's token ids, its sampling settings and stop
// conditions, and the stream of events it produces, read by the HTTP thread that owns the client.
// A Sequence is shared by the scheduler (which writes events) and the HTTP handler (which reads
// them and may cancel).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace doppler::serve {

struct SamplingSettings {
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
  double min_p = 0.0;        // 0: off
  double presence_penalty = 0.0;   // OpenAI's: subtracted once from every token already generated
  double frequency_penalty = 0.0;  // subtracted once per time a token was generated
  std::optional<uint64_t> seed;    // unset: a random one
  bool greedy() const { return temperature <= 0.0; }
};

struct SequenceRequest {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 0;  // > 0
  std::vector<std::string> stop;
  SamplingSettings sampling;
  int top_logprobs = -1;  // -1: no logprobs; 0..20: the chosen token's, and that many alternatives
  bool ignore_eos = false;
};

enum class FinishReason { kStop, kLength, kCancelled };
const char* FinishReasonName(FinishReason r);  // OpenAI's "stop" / "length"; "cancelled" (a client that left, or shutdown past the drain timeout)

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
};

// One generated token, with its log probability and the alternatives asked for.
struct GeneratedToken {
  int32_t id = 0;
  float logprob = 0;
  std::vector<TokenLogprob> top;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens whose KV cache was reused from the previous request
};

// What the scheduler reports, in order: any number of deltas, then one final event.
struct SequenceEvent {
  std::string text;                     // text that is now final (never part of a stop string)
  std::vector<GeneratedToken> tokens;   // the tokens generated since the last event
  bool final = false;
  FinishReason finish = FinishReason::kStop;
  Usage usage;                          // in the final event
  absl::Status error;                   // in the final event: the engine failed
};

class Sequence {
 public:
  Sequence(uint64_t id, SequenceRequest request) : id_(id), request_(std::move(request)) {}

  uint64_t id() const { return id_; }
  const SequenceRequest& request() const { return request_; }

  // Scheduler side.
  void Push(SequenceEvent event);
  bool cancelled() const { return cancelled_.load(); }

  // Client side: the next event, or nullopt when none came within `wait`.
  std::optional<SequenceEvent> Next(std::chrono::milliseconds wait);
  // Stops generation at the next step (a client that went away); the sequence then ends with
  // FinishReason::kCancelled.
  void Cancel() { cancelled_.store(true); }

 private:
  const uint64_t id_;
  const SequenceRequest request_;
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SequenceEvent> events_;
};

}  // namespace doppler::serve
