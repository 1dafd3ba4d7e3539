// The server's scheduler: one worker thread owns the batched engine (runtime/batch_engine.h).
// Requests join the running batch between any two steps and leave it as they finish, so every
// running request advances one token a step, and one that joins delays the others by at most one
// prefill chunk. Requests the KV pool has no room for wait in order (the engine reserves a
// request's pages for its whole generation when it admits it). Prompt prefixes another request
// computed are reused from the pool by whole pages (Usage::cached_tokens).
//
// Greedy requests take the token the GPU chose; those that sample, use penalties or want
// logprobs take their row's logits and choose on the host (TokenSampler), with their own settings.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "runtime/batch_engine.h"
#include "runtime/stop_matcher.h"
#include "serve/scheduler.h"
#include "serve/token_sampler.h"
#include "tokenizers/stream_decoder.h"
#include "tokenizers/tokenizer.h"

namespace doppler::serve {

class BatchScheduler : public Scheduler {
 public:
  // `tokenizer` may be null (token ids in, no stop strings, no end of sequence). `max_waiting`
  // bounds the requests not yet running.
  BatchScheduler(runtime::BatchEngine& engine, const tokenizers::Tokenizer* tokenizer, int64_t max_waiting,
                 SchedulerObserver* observer);
  ~BatchScheduler() override;

  absl::StatusOr<std::shared_ptr<Sequence>> Submit(SequenceRequest request) override;
  SchedulerLoad Load() const override;
  void StopAccepting() override;
  void CancelAll() override;
  bool WaitIdle(std::chrono::milliseconds limit) override;
  int64_t context() const override { return engine_.context(); }

 private:
  using Clock = std::chrono::steady_clock;
  // A request in the engine.
  struct Active {
    std::shared_ptr<Sequence> seq;
    Clock::time_point submitted, last;
    bool host_choice = false;
    std::unique_ptr<TokenSampler> sampler;
    std::unique_ptr<tokenizers::StreamDecoder> decoder;
    std::unique_ptr<runtime::StopMatcher> stops;
    int64_t generated = 0;
  };

  void Work();
  // Adds the submitted requests to the engine (the worker's side of Submit).
  void Join(std::deque<std::pair<std::shared_ptr<Sequence>, Clock::time_point>> joining);
  // Handles one token of request `id`; false when the request ended (and left the engine).
  void Take(int id, runtime::StepToken& token);
  void Finish(int id, FinishReason reason, absl::Status error = absl::OkStatus());

  runtime::BatchEngine& engine_;
  const tokenizers::Tokenizer* tokenizer_;
  const int64_t max_waiting_;
  SchedulerObserver* observer_;
  std::vector<int32_t> eos_;
  std::map<int, Active> active_;  // by engine sequence id; the worker's alone

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<Sequence>, Clock::time_point>> submitted_;  // not yet in the engine
  SchedulerLoad load_;
  bool accepting_ = true, quit_ = false, cancel_all_ = false;
  uint64_t next_id_ = 1;
  std::thread worker_;
};

}  // namespace doppler::serve
