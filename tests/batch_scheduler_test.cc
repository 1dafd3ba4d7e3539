// The server's scheduler (serve/batch_scheduler.h) over the llama fixture's batched engine on the
// test device: what it takes and refuses while its worker is in the middle of a step.
#include "serve/batch_scheduler.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "runtime/batch_engine.h"
#include "tests/support/engine_env.h"
#include "tests/support/fixtures.h"

namespace doppler::serve {
namespace {

// Holds the scheduler's worker at the first token it hands out, until released: the worker is then
// between taking requests into a step and counting them anew.
class HoldingObserver : public SchedulerObserver {
 public:
  void OnFirstToken(double) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (held_) return;
    held_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return released_; });
  }
  void OnToken(double) override {}
  void OnFinished(const Sequence&, const Usage&, FinishReason) override {}

  bool WaitHeld(std::chrono::seconds limit) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return held_; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false, released_ = false;
};

// A request the worker has taken into a step counts against the engine's places and the queue
// until the step's counts replace it: the scheduler takes --parallel + --max-queue requests in all,
// and refuses the next with ResourceExhausted (the server's 429).
TEST(BatchScheduler, RequestsTakenIntoAStepCountUntilItEnds) {
  constexpr int kParallel = 2;
  constexpr int64_t kQueue = 3;
  absl::StatusOr<std::unique_ptr<runtime::BatchEngine>> engine = runtime::BatchEngine::Create(
      test::ReferenceEngineOptions(test::FixturesDir() / "hf" / "llama", 8), test::ReferenceBatchOptions(kParallel));
  ASSERT_TRUE(engine.ok()) << engine.status();
  HoldingObserver observer;
  BatchScheduler scheduler(**engine, nullptr, kQueue, &observer);
  auto request = [] {
    SequenceRequest r;
    r.prompt = {1, 5, 7, 9};
    r.max_tokens = 32;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    return r;
  };
  ASSERT_TRUE(scheduler.Submit(request()).ok());
  if (!observer.WaitHeld(std::chrono::seconds(120))) {
    observer.Release();
    GTEST_FAIL() << "the worker handed out no first token";
  }
  for (int64_t i = 1; i < kParallel + kQueue; ++i) EXPECT_TRUE(scheduler.Submit(request()).ok()) << "request " << i;
  absl::StatusOr<std::shared_ptr<Sequence>> extra = scheduler.Submit(request());
  EXPECT_EQ(extra.status().code(), absl::StatusCode::kResourceExhausted) << extra.status();
  observer.Release();
  scheduler.CancelAll();
  EXPECT_TRUE(scheduler.WaitIdle(std::chrono::seconds(120)));
}

}  // namespace
}  // namespace doppler::serve
