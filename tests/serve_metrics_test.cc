// /metrics' Prometheus text: cumulative histogram buckets, counters by label, the load gauges.
#include "gtest/gtest.h"
#include "serve/metrics.h"

namespace doppler::serve {
namespace {

TEST(ServeMetrics, HistogramBucketsAreCumulativeWithSumAndCount) {
  Histogram h({0.1, 1});
  for (double x : {0.05, 0.1, 0.5, 3.0}) h.Observe(x);
  EXPECT_EQ(h.Text("t", "help"),
            "# HELP t help\n# TYPE t histogram\n"
            "t_bucket{le=\"0.1\"} 2\nt_bucket{le=\"1\"} 3\nt_bucket{le=\"+Inf\"} 4\nt_sum 3.65\nt_count 4\n");
}

TEST(ServeMetrics, CountsFinishedAndRejectedRequestsAndReportsTheLoad) {
  Metrics m;
  Sequence seq(1, SequenceRequest{});
  m.OnFinished(seq, Usage{10, 4, 3}, FinishReason::kLength);
  m.OnFinished(seq, Usage{5, 2, 0}, FinishReason::kCancelled);
  m.OnRejected(429);
  m.OnRejected(429);
  m.OnRejected(400);
  m.OnFirstToken(0.2);
  const std::string text = m.Text(SchedulerLoad{1, 7, 0.25});
  for (const char* line : {"doppler_requests_running 1\n", "doppler_requests_waiting 7\n",
                           "doppler_kv_cache_usage_ratio 0.25\n", "doppler_prompt_tokens_total 15\n",
                           "doppler_prompt_cached_tokens_total 3\n", "doppler_generation_tokens_total 6\n",
                           "doppler_requests_finished_total{finish_reason=\"length\"} 1\n",
                           "doppler_requests_finished_total{finish_reason=\"cancelled\"} 1\n",
                           "doppler_requests_finished_total{finish_reason=\"stop\"} 0\n",
                           "doppler_requests_rejected_total{status=\"429\"} 2\n",
                           "doppler_requests_rejected_total{status=\"400\"} 1\n",
                           "doppler_time_to_first_token_seconds_count 1\n",
                           "doppler_time_per_output_token_seconds_count 0\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\nin\n" << text;
  }
}

}  // namespace
}  // namespace doppler::serve
