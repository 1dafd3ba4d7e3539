#include "tools/cli_bench_batch.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/profile.h"
#include "nlohmann/json.hpp"
#include "runtime/batch_engine.h"
#include "tools/cli_batch.h"

namespace doppler::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct Row {
  int batch = 0;
  double prefill_s = 0, decode_s = 0;
  std::string profile;  // with --profile: the decode step's GPU time by op kind and by kernel
};

// The GPU time of the next decode step (three profiled runs) by op kind and by kernel variant.
absl::StatusOr<std::string> ProfileStep(runtime::BatchEngine& e, int b, double measured_step_ms) {
  std::vector<vk::ProfiledStep> samples;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<vk::ProfiledStep> p = e.ProfileDecodeStep();
    if (!p.ok()) return p.status();
    samples.push_back(*std::move(p));
  }
  const runtime::ProfileReport r =
      runtime::MakeProfile(e.decode_graph(b), *e.profiled_plan(), samples, 0, measured_step_ms * 1e6);
  std::string out = absl::StrFormat("B=%d: profiled step %.1f us (measured %.1f us), %d levels\n", b, r.total_ns / 1e3,
                                    measured_step_ms * 1e3, r.levels);
  for (const runtime::ProfileKind& k : r.kinds) {
    absl::StrAppendFormat(&out, "  %-16s %4d x %10.1f us  %5.1f%%\n", k.op, k.count, k.ns / 1e3, 100 * k.ns / r.total_ns);
  }
  std::map<std::string, std::pair<int, double>> kernels;
  for (const runtime::ProfileNode& n : r.nodes) {
    kernels[n.kernel].first += 1;
    kernels[n.kernel].second += n.ns;
  }
  std::vector<std::pair<double, std::string>> by_time;
  for (const auto& [name, v] : kernels) by_time.push_back({v.second, absl::StrCat(v.first, " x ", name)});
  std::sort(by_time.rbegin(), by_time.rend());
  for (size_t i = 0; i < std::min<size_t>(10, by_time.size()); ++i) {
    absl::StrAppendFormat(&out, "    %10.1f us  %s\n", by_time[i].first / 1e3, by_time[i].second);
  }
  return absl::StrCat(out, runtime::FormatDriverStatistics({e.profiled_plan()}));
}

// One round at batch size b: b random prompts prefilled (prefill steps only), then `generate`
// decode steps of all b together (with `profile`, then a profiled one); the sequences leave at the end.
absl::StatusOr<Row> Round(runtime::BatchEngine& e, int b, const BatchBenchOptions& o, std::mt19937& rng,
                          bool profile = false) {
  Row row{b};
  std::vector<int> ids;
  for (int i = 0; i < b; ++i) {
    std::vector<int32_t> prompt(static_cast<size_t>(o.prompt));
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(e.config().vocab_size));
    absl::StatusOr<int> id = e.Add(prompt, o.generate + 2);  // the prefill's token, -n more, the profiled step
    if (!id.ok()) return id.status();
    ids.push_back(*id);
  }
  auto leave = [&] {
    for (int id : ids) e.Remove(id);
  };
  const Clock::time_point t0 = Clock::now();
  for (int prefilled = 0; prefilled < b;) {
    absl::StatusOr<std::vector<runtime::StepToken>> step = e.Step(/*decode=*/false);
    if (!step.ok()) {
      leave();
      return step.status();
    }
    prefilled += static_cast<int>(step->size());
  }
  const Clock::time_point t1 = Clock::now();
  // -n tokens a sequence after the prefill's first (a step may give several: the GPU loop).
  for (int64_t produced = 0; produced < static_cast<int64_t>(b) * o.generate;) {
    absl::StatusOr<std::vector<runtime::StepToken>> step = e.Step();
    if (!step.ok()) {
      leave();
      return step.status();
    }
    produced += static_cast<int64_t>(step->size());
  }
  row.prefill_s = Seconds(t0, t1);
  row.decode_s = Seconds(t1, Clock::now());
  if (profile) {
    absl::StatusOr<std::string> p = ProfileStep(e, b, row.decode_s * 1e3 / static_cast<double>(o.generate));
    if (!p.ok()) {
      leave();
      return p.status();
    }
    row.profile = *p;
  }
  leave();
  return row;
}

}  // namespace

absl::StatusOr<int> BenchBatch(runtime::EngineOptions options, const ParsedArgs& args, const BatchBenchOptions& o) {
  absl::StatusOr<runtime::BatchOptions> batch = BatchOptionsFromArgs(args);
  if (!batch.ok()) return batch.status();
  const int most = *std::max_element(o.batches.begin(), o.batches.end());
  batch->max_sequences = std::max(batch->max_sequences, most);
  const int64_t per_sequence = o.prompt + o.generate + 1;
  if (options.context <= 0) options.context = per_sequence;
  if (options.context < per_sequence) {
    return absl::InvalidArgumentError(absl::StrCat("--ctx-size ", options.context, " is smaller than the ",
                                                   per_sequence, " positions -p and -n need"));
  }
  if (batch->ctx_total == 0) batch->ctx_total = static_cast<int64_t>(most) * (per_sequence + 2 * batch->page_rows);
  absl::StatusOr<std::unique_ptr<runtime::BatchEngine>> created = runtime::BatchEngine::Create(options, *batch);
  if (!created.ok()) return created.status();
  runtime::BatchEngine& e = **created;
  if (absl::Status s = e.Prepare(most); !s.ok()) return s;
  std::mt19937 rng(o.seed);
  std::vector<Row> rows;
  for (int b : o.batches) {
    // A warm-up round at each B (not counted), then the measured ones, averaged.
    if (absl::StatusOr<Row> warm = Round(e, b, o, rng); !warm.ok()) return warm.status();
    Row sum{b};
    for (int64_t r = 0; r < o.repetitions; ++r) {
      absl::StatusOr<Row> row = Round(e, b, o, rng, o.profile && r + 1 == o.repetitions);
      if (!row.ok()) return row.status();
      sum.prefill_s += row->prefill_s / static_cast<double>(o.repetitions);
      sum.decode_s += row->decode_s / static_cast<double>(o.repetitions);
      sum.profile = row->profile;
    }
    rows.push_back(sum);
  }
  const std::string model = options.synthetic.empty() ? options.model_path.string() : absl::StrCat(options.synthetic, " (synthetic)");
  if (o.json) {
    nlohmann::json j;
    j["model"] = model;
    j["device"] = e.device().info().name;
    j["p"] = o.prompt;
    j["n"] = o.generate;
    j["r"] = o.repetitions;
    j["rows"] = nlohmann::json::array();
    for (const Row& r : rows) {
      const double pp = static_cast<double>(r.batch * o.prompt) / r.prefill_s;
      const double tg = static_cast<double>(r.batch * o.generate) / r.decode_s;
      j["rows"].push_back({{"batch", r.batch},
                           {"prefill_s", r.prefill_s},
                           {"prefill_tok_s", pp},
                           {"decode_s", r.decode_s},
                           {"decode_tok_s", tg},
                           {"decode_tok_s_per_sequence", tg / r.batch},
                           {"decode_step_ms", r.decode_s * 1e3 / static_cast<double>(o.generate)}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("model: %s\ndevice: %s\nprompt %lld tokens a sequence, %lld decode steps, %lld repetitions after a "
              "warm-up round\n\n",
              model.c_str(), e.device().info().name.c_str(), static_cast<long long>(o.prompt),
              static_cast<long long>(o.generate), static_cast<long long>(o.repetitions));
  std::printf("| %5s | %9s | %12s | %9s | %12s | %14s | %12s |\n", "B", "T_PP s", "S_PP tok/s", "T_TG s", "S_TG tok/s",
              "tok/s per seq", "step ms");
  for (const Row& r : rows) {
    const double pp = static_cast<double>(r.batch * o.prompt) / r.prefill_s;
    const double tg = static_cast<double>(r.batch * o.generate) / r.decode_s;
    std::printf("| %5d | %9.3f | %12.1f | %9.3f | %12.1f | %14.1f | %12.3f |\n", r.batch, r.prefill_s, pp, r.decode_s,
                tg, tg / r.batch, r.decode_s * 1e3 / static_cast<double>(o.generate));
  }
  for (const Row& r : rows) {
    if (!r.profile.empty()) std::printf("\n%s", r.profile.c_str());
  }
  return 0;
}

}  // namespace doppler::cli
