// The Scheduler of today's engine, which holds one sequence: one worker thread takes the waiting
// sequences in order and generates each to its end. Requests beyond the one running wait (so
// --parallel N admits N but runs them one after the other until the batched engine lands).
//
// Between requests the KV cache is kept: a prompt that starts with the tokens the cache already
// holds (the previous conversation turn, a repeated system prompt) feeds only the rest; that
// count is Usage::cached_tokens. (Not for models with sliding-window layers, whose ring caches
// cannot be taken back that far.)
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "models/tokenizer/tokenizer.h"
#include "runtime/engine.h"
#include "serve/scheduler.h"

namespace doppler::serve {

class SequentialScheduler : public Scheduler {
 public:
  // `tokenizer` may be null (a model without one: token ids in, no stop strings, no end of
  // sequence). `max_waiting` bounds the queue.
  SequentialScheduler(runtime::Engine& engine, const models::Tokenizer* tokenizer, int64_t max_waiting,
                      SchedulerObserver* observer);
  ~SequentialScheduler() override;

  absl::StatusOr<std::shared_ptr<Sequence>> Submit(SequenceRequest request) override;
  SchedulerLoad Load() const override;
  void StopAccepting() override;
  void CancelAll() override;
  bool WaitIdle(std::chrono::milliseconds limit) override;
  int64_t context() const override { return engine_.context(); }

 private:
  void Work();
  // Generates `seq` to its end, reporting through its events; the error when the engine fails.
  absl::Status Generate(Sequence& seq, std::chrono::steady_clock::time_point submitted);
  // Feeds the part of `prompt` the cache does not hold; returns how many tokens were reused.
  absl::StatusOr<int64_t> FeedPrompt(std::span<const int32_t> prompt, bool want_logits, std::vector<float>* logits,
                                     int32_t* next);

  runtime::Engine& engine_;
  const models::Tokenizer* tokenizer_;
  const int64_t max_waiting_;
  SchedulerObserver* observer_;
  const bool reuse_prefix_;
  std::vector<int32_t> cached_;  // the tokens whose keys and values the cache holds, from position 0

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<Sequence>, std::chrono::steady_clock::time_point>> waiting_;
  std::shared_ptr<Sequence> running_;  // the one the worker generates
  bool accepting_ = true;
  bool quit_ = false;
  double kv_usage_ = 0;
  uint64_t next_id_ = 1;
  std::thread worker_;
};

}  // namespace doppler::serve
