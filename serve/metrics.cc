#include "serve/metrics.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace doppler::serve {

void Histogram::Observe(double x) {
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), x) - bounds_.begin());
  ++counts_[i];
  sum_ += x;
  ++count_;
}

std::string Histogram::Text(const std::string& name, const std::string& help) const {
  std::string out = absl::StrCat("# HELP ", name, " ", help, "\n# TYPE ", name, " histogram\n");
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    absl::StrAppend(&out, name, "_bucket{le=\"", bounds_[i], "\"} ", cumulative, "\n");
  }
  absl::StrAppend(&out, name, "_bucket{le=\"+Inf\"} ", count_, "\n", name, "_sum ", sum_, "\n", name, "_count ", count_, "\n");
  return out;
}

Metrics::Metrics()
    : ttft_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      per_token_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}) {}

void Metrics::OnFirstToken(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_.Observe(seconds);
}

void Metrics::OnToken(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  per_token_.Observe(seconds);
}

void Metrics::OnFinished(const Sequence& seq, const Usage& usage, FinishReason reason) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += static_cast<uint64_t>(usage.prompt_tokens);
  cached_tokens_ += static_cast<uint64_t>(usage.cached_tokens);
  generated_tokens_ += static_cast<uint64_t>(usage.completion_tokens);
  ++finished_[static_cast<int>(reason)];
}

void Metrics::OnRejected(int http_status) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [status, count] : rejected_) {
    if (status == http_status) {
      ++count;
      return;
    }
  }
  rejected_.push_back({http_status, 1});
}

std::string Metrics::Text(const SchedulerLoad& load) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto gauge = [](const char* name, const char* help, auto value) {
    return absl::StrCat("# HELP ", name, " ", help, "\n# TYPE ", name, " gauge\n", name, " ", value, "\n");
  };
  auto counter = [](const char* name, const char* help, uint64_t value) {
    return absl::StrCat("# HELP ", name, " ", help, "\n# TYPE ", name, " counter\n", name, " ", value, "\n");
  };
  std::string out;
  out += gauge("doppler_requests_running", "Sequences being generated.", load.running);
  out += gauge("doppler_requests_waiting", "Sequences queued behind the running ones.", load.waiting);
  out += gauge("doppler_kv_cache_usage_ratio", "Fraction of the KV cache holding tokens (0..1).", load.kv_usage);
  out += counter("doppler_prompt_tokens_total", "Prompt tokens of finished requests.", prompt_tokens_);
  out += counter("doppler_prompt_cached_tokens_total", "Prompt tokens whose KV cache was reused.", cached_tokens_);
  out += counter("doppler_generation_tokens_total", "Generated tokens of finished requests.", generated_tokens_);
  out += "# HELP doppler_requests_finished_total Requests that ran to their end, by finish reason.\n"
         "# TYPE doppler_requests_finished_total counter\n";
  for (FinishReason r : {FinishReason::kStop, FinishReason::kLength, FinishReason::kCancelled}) {
    absl::StrAppend(&out, "doppler_requests_finished_total{finish_reason=\"", FinishReasonName(r), "\"} ",
                    finished_[static_cast<int>(r)], "\n");
  }
  out += "# HELP doppler_requests_rejected_total Requests answered with an error, by HTTP status.\n"
         "# TYPE doppler_requests_rejected_total counter\n";
  for (const auto& [status, count] : rejected_) {
    absl::StrAppend(&out, "doppler_requests_rejected_total{status=\"", status, "\"} ", count, "\n");
  }
  out += ttft_.Text("doppler_time_to_first_token_seconds", "Time from a request's arrival to its first token.");
  out += per_token_.Text("doppler_time_per_output_token_seconds", "Time between a sequence's consecutive tokens.");
  return out;
}

}  // namespace doppler::serve
