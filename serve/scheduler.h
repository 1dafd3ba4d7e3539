// Between the HTTP layer and the engine: requests become sequences in a queue, up to `parallel`
// of them run, the rest wait. The HTTP layer sees only this interface (its implementation:
// serve/batch_scheduler.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "serve/sequence.h"

namespace doppler::serve {

struct SchedulerLoad {
  int64_t running = 0;  // sequences the engine is generating for
  int64_t waiting = 0;  // sequences queued behind them
  double kv_usage = 0;  // the fraction of the KV cache in use (0..1)
};

// Told about every step, for the metrics.
class SchedulerObserver {
 public:
  virtual ~SchedulerObserver() = default;
  virtual void OnFirstToken(double seconds_since_submit) = 0;
  virtual void OnToken(double seconds_since_previous) = 0;
  virtual void OnFinished(const Sequence& seq, const Usage& usage, FinishReason reason) = 0;
};

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  // Queues a request; ResourceExhausted when the queue is full, Unavailable while draining.
  virtual absl::StatusOr<std::shared_ptr<Sequence>> Submit(SequenceRequest request) = 0;
  virtual SchedulerLoad Load() const = 0;
  // Refuses new requests from now on (Submit: Unavailable).
  virtual void StopAccepting() = 0;
  // Cancels every running and waiting sequence (shutdown, after the drain timeout).
  virtual void CancelAll() = 0;
  // Waits until no sequence runs or waits, at most `limit`; true when idle.
  virtual bool WaitIdle(std::chrono::milliseconds limit) = 0;
  // The engine's context size: a sequence's prompt and generation fit in it.
  virtual int64_t context() const = 0;
};

}  // namespace doppler::serve
