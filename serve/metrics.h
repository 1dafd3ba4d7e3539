// The server's counters in Prometheus' text format (/metrics): requests running and waiting,
// prompt and generated tokens, KV-cache use, time to first token and per-token latency.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "serve/scheduler.h"

namespace doppler::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  void Observe(double x);
  // The _bucket, _sum and _count lines of metric `name`.
  std::string Text(const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics : public SchedulerObserver {
 public:
  Metrics();
  void OnFirstToken(double seconds_since_submit) override;
  void OnToken(double seconds_since_previous) override;
  void OnFinished(const Sequence& seq, const Usage& usage, FinishReason reason) override;
  // A request refused before it reached the scheduler (bad input, busy, wrong key), by status.
  void OnRejected(int http_status);

  std::string Text(const SchedulerLoad& load) const;

 private:
  mutable std::mutex mu_;
  uint64_t prompt_tokens_ = 0, cached_tokens_ = 0, generated_tokens_ = 0;
  uint64_t finished_[3] = {0, 0, 0};  // by FinishReason
  std::vector<std::pair<int, uint64_t>> rejected_;  // by HTTP status
  Histogram ttft_, per_token_;
};

}  // namespace doppler::serve
