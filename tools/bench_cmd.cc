// doppler bench: prefill and decode speed of a model (a file, or a synthetic one in the exact
// shapes of a published model), like llama-bench: pp (prompt tokens/s), tg (generated tokens/s),
// TTFT, decode latency percentiles, VRAM, per-token submits and dispatches, and tg as a fraction
// of the bandwidth floor measured on the device. --profile adds the per-dispatch GPU profile of a
// decode step.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backend_vk/bandwidth.h"
#include "graph/layout.h"
#include "models/synthetic.h"
#include "nlohmann/json.hpp"
#include "runtime/profile.h"
#include "tools/cli_batch.h"
#include "tools/cli_bench_batch.h"
#include "tools/cli_engine.h"
#include "tools/commands.h"

namespace doppler::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

CommandSpec Spec() {
  CommandSpec spec{"bench",
                   "Measure prefill (pp) and decode (tg) speed, like llama-bench: -p prompt tokens, -n generated tokens,\n"
                   "-r repetitions after warm-up runs (at least two, and 0.5 s). --synthetic NAME benchmarks random weights in a published\n"
                   "model's exact shapes (no download).",
                   EngineOptionSpecs()};
  const std::vector<OptionSpec> more = {
      {"p", "p", "N", "prompt tokens (random ids) for the prefill test and TTFT", "512"},
      {"n", "n", "N", "tokens generated for the decode test (an end-of-sequence token does not stop it)", "128"},
      {"r", "r", "N", "repetitions (mean ± sd)", "5"},
      {"n-depth", "d", "N",
       "tokens in the KV cache before each test (random ids, prefilled once, untimed), as llama-bench's -d: pp and tg at "
       "that depth",
       "0"},
      GpuLoopOptionSpec(),
      {"json", "", "", "print one JSON object instead of the table", ""},
      {"profile", "", "", "GPU time of a decode step and a prefill chunk per barrier level (shared by its dispatches, the timestamps' own cost taken off), per op kind and per node", ""},
      {"seed", "s", "N", "seed of the random prompt ids and of the sampler", "1"},
      {"batch", "", "LIST",
       "batched throughput instead, as llama-batched-bench: for each B (comma-separated, e.g. 1,8,32,64), B sequences "
       "of -p prompt tokens prefilled, then -n decode steps of all B together",
       ""},
  };
  spec.options.insert(spec.options.end(), more.begin(), more.end());
  for (const OptionSpec& o : BatchOptionSpecs()) spec.options.push_back(o);
  // The decode test chooses tokens as `doppler run` does, but greedily unless told otherwise (as
  // llama-bench, which does not sample).
  for (OptionSpec o : SamplingOptionSpecs()) {
    if (o.name == "seed") continue;  // bench's own, above
    if (o.name == "temp") {
      o.help = "sampling temperature of the decode test; 0 is greedy (the options below apply above 0)";
      o.default_value = "0";
    }
    spec.options.push_back(o);
  }
  return spec;
}

struct MeanSd {
  double mean = 0, sd = 0;
};

MeanSd Stats(const std::vector<double>& v) {
  MeanSd m;
  if (v.empty()) return m;
  for (double x : v) m.mean += x;
  m.mean /= static_cast<double>(v.size());
  if (v.size() > 1) {
    double s = 0;
    for (double x : v) s += (x - m.mean) * (x - m.mean);
    m.sd = std::sqrt(s / static_cast<double>(v.size() - 1));
  }
  return m;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

// Decodes `n` tokens (through the GPU loop where a whole loop's tokens are wanted) and returns the
// seconds it took. Each token's latency (ms; a loop's time shared by its tokens) goes to `latencies`.
absl::StatusOr<double> Decode(runtime::Engine& e, int64_t n, std::vector<double>* latencies) {
  double total = 0;
  for (int64_t done = 0; done < n;) {
    const Clock::time_point t0 = Clock::now();
    absl::StatusOr<std::vector<int32_t>> tokens = e.DecodeUpTo(n - done);
    if (!tokens.ok()) return tokens.status();
    const int64_t count = static_cast<int64_t>(tokens->size());
    const double seconds = Seconds(t0, Clock::now());
    if (latencies) latencies->insert(latencies->end(), static_cast<size_t>(count), seconds * 1e3 / static_cast<double>(count));
    total += seconds;
    done += count;
  }
  return total;
}

}  // namespace

absl::StatusOr<int> BenchCommand(const std::vector<std::string>& argv) {
  const CommandSpec spec = Spec();
  absl::StatusOr<std::optional<ParsedArgs>> parsed = ParseOrHelp(spec, argv);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->has_value()) return 0;
  const ParsedArgs& args = **parsed;
  absl::StatusOr<int64_t> p = args.GetInt("p"), n = args.GetInt("n"), r = args.GetInt("r"),
                          seed = args.GetInt("seed"), depth = args.GetInt("n-depth");
  for (const absl::Status& s : {p.status(), n.status(), r.status(), seed.status(), depth.status()}) {
    if (!s.ok()) return s;
  }
  if (*p < 1) return absl::InvalidArgumentError("-p must be at least 1");
  if (*depth < 0) return absl::InvalidArgumentError("-d must be at least 0");
  if (*n < 1) return absl::InvalidArgumentError("-n must be at least 1");
  if (*r < 1) return absl::InvalidArgumentError("-r must be at least 1");
  absl::StatusOr<runtime::EngineOptions> options = EngineOptionsFromArgs(args);
  if (!options.ok()) return options.status();
  absl::StatusOr<runtime::SamplingOptions> sampling = SamplingOptionsFromArgs(args);
  if (!sampling.ok()) return sampling.status();
  options->sampling = *sampling;
  if (args.Has("batch")) {
    if (*depth > 0) return UsageError("-d is for the single-sequence test; --batch prefills -p tokens a sequence");
    absl::StatusOr<std::vector<int32_t>> list = args.GetIntList("batch");
    if (!list.ok()) return list.status();
    BatchBenchOptions bo;
    for (int32_t b : *list) {
      if (b < 1 || b > 1024) return UsageError(absl::StrCat("--batch: ", b, " is not a batch size (1..1024)"));
      bo.batches.push_back(b);
    }
    if (bo.batches.empty()) return UsageError("--batch needs at least one batch size");
    bo.prompt = *p;
    bo.generate = *n;
    bo.repetitions = *r;
    bo.seed = static_cast<uint32_t>(*seed);
    bo.json = args.Has("json");
    bo.profile = args.Has("profile");
    return BenchBatch(*options, args, bo);
  }
  const bool json_out = args.Has("json"), profile = args.Has("profile");
  // The context holds the depth and then the prompt or the generation (each test starts from a
  // cache holding the depth alone), and the prompt runs as one prefill step, as llama-bench's pp
  // does. After the warm-up prefill, enough decode steps to run the GPU loop too.
  const int64_t warmup_decode = std::min<int64_t>(*n, std::max(8, options->gpu_loop));
  const int64_t needed = *depth + std::max(*p + warmup_decode, *n);
  if (options->context <= 0) options->context = needed;
  if (options->context < needed) {
    return absl::InvalidArgumentError(absl::StrCat("--ctx-size ", options->context, " is smaller than the ", needed,
                                                   " positions -d ", *depth, ", -p ", *p, " and -n ", *n, " need"));
  }
  options->prefill_chunk = *p;
  absl::StatusOr<std::unique_ptr<runtime::Engine>> created = runtime::Engine::Create(*options);
  if (!created.ok()) return created.status();
  runtime::Engine& e = **created;
  const formats::ModelConfig& config = e.config();

  std::mt19937 rng(static_cast<uint32_t>(*seed));
  auto random_ids = [&](int64_t count) {
    std::vector<int32_t> ids(static_cast<size_t>(count));
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(config.vocab_size));
    return ids;
  };
  const std::vector<int32_t> prompt = random_ids(*p), depth_ids = random_ids(*depth);
  // Where every test and profile starts: a sequence holding the depth's tokens (untimed). They are
  // prefilled once (in chunks of -p, the prefill plan's); each later start takes the sequence back
  // to the depth, with the token that fill chose next. The tests write only positions from the depth
  // on, so the cache keeps the depth's keys and values, except the rows a sliding window's ring
  // reuses (and the repeat penalty's ring of recent ids), which an earlier test's tokens hold
  // instead: as many rows, read alike.
  std::optional<int32_t> after_depth;
  auto start = [&]() -> absl::Status {
    if (depth_ids.empty()) {
      e.Reset();
      return absl::OkStatus();
    }
    if (after_depth) return e.Rewind(*depth, *after_depth);
    if (options->progress) {
      std::fprintf(stderr, "prefilling the depth (%lld tokens, in chunks of %lld)...", static_cast<long long>(*depth),
                   static_cast<long long>(options->prefill_chunk));
    }
    e.Reset();
    absl::StatusOr<int32_t> next = e.Prefill(depth_ids);
    if (options->progress) std::fprintf(stderr, " %s\n", next.ok() ? "done" : "failed");
    if (!next.ok()) return next.status();
    after_depth = *next;
    return absl::OkStatus();
  };

  // Warm-up (not counted): rounds of a prefill and a few decode steps, at least two and for at
  // least kWarmupSeconds. After one round (and after two) the first timed prefill on an H100 often
  // took 50-80 ms instead of 13-17 (Llama-3.2-1B and Qwen3-0.6B, 512 tokens), a one-off stall
  // that made pp's sd a fifth of its mean.
  constexpr double kWarmupSeconds = 0.5;
  constexpr int kMaxWarmupRounds = 50;
  const Clock::time_point warmup_start = Clock::now();
  for (int round = 0; round < kMaxWarmupRounds && (round < 2 || Seconds(warmup_start, Clock::now()) < kWarmupSeconds);
       ++round) {
    if (absl::Status s = start(); !s.ok()) return s;
    if (absl::StatusOr<int32_t> t = e.Prefill(prompt); !t.ok()) return t.status();
    if (absl::StatusOr<double> t = Decode(e, warmup_decode, nullptr); !t.ok()) return t.status();
  }
  const uint64_t vram = e.device().memory_stats().used_bytes;

  std::vector<double> pp_rates, ttft, tg_rates, latencies;
  uint64_t submits = 0;
  for (int64_t rep = 0; rep < *r; ++rep) {
    if (absl::Status s = start(); !s.ok()) return s;
    Clock::time_point t0 = Clock::now();
    if (absl::StatusOr<int32_t> t = e.Prefill(prompt); !t.ok()) return t.status();
    const double s = Seconds(t0, Clock::now());
    ttft.push_back(s * 1e3);
    pp_rates.push_back(static_cast<double>(*p) / s);
    // tg from the depth alone, as llama-bench's: the first step embeds the last token chosen.
    if (absl::Status s = start(); !s.ok()) return s;
    const uint64_t submits0 = e.device().submit_count();
    absl::StatusOr<double> total = Decode(e, *n, &latencies);
    if (!total.ok()) return total.status();
    submits += e.device().submit_count() - submits0;
    tg_rates.push_back(static_cast<double>(*n) / *total);
  }

  const vk::Plan& decode = e.decode_plan();
  const uint64_t weight_bytes_per_token = runtime::WeightBytesPerStep(e.decode_graph(), decode, 1);
  vk::PipelineCache bandwidth_pipelines(e.mutable_device());
  absl::StatusOr<vk::Bandwidth> bandwidth = vk::MeasureCopyBandwidth(e.mutable_device(), bandwidth_pipelines);
  if (!bandwidth.ok()) return bandwidth.status();
  const double floor_tok_s = bandwidth->bytes_per_second / static_cast<double>(weight_bytes_per_token);
  const MeanSd pp = Stats(pp_rates), tg = Stats(tg_rates), first = Stats(ttft), lat = Stats(latencies);
  uint64_t params = 0;
  for (const graph::Node& node : e.graph().nodes()) {
    if (node.kind == graph::OpKind::kParam) params += static_cast<uint64_t>(graph::NumElements(node.type.shape, 0));
  }
  uint64_t model_bytes = 0;
  for (const graph::Node& node : e.graph().nodes()) {
    if (node.kind == graph::OpKind::kParam) model_bytes += graph::ByteSize(node.type.dtype, graph::NumElements(node.type.shape, 0));
  }
  const std::string model_name = options->synthetic.empty() ? options->model_path.string()
                                                             : absl::StrCat(options->synthetic, " (synthetic)");
  const std::string quant = args.Has("quant") ? args.Get("quant") : (options->synthetic.empty() ? "file" : args.Get("dtype"));
  const double per_token_submits = static_cast<double>(submits) / static_cast<double>(*r * *n);

  std::optional<runtime::ProfileReport> report, prefill_report;
  if (profile) {
    if (absl::Status s = start(); !s.ok()) return s;
    const int64_t steps = std::min<int64_t>(*n, 16);
    absl::StatusOr<std::vector<vk::ProfiledStep>> samples = e.ProfileDecodeSteps(steps);
    if (!samples.ok()) return samples.status();
    report = runtime::MakeProfile(e.decode_graph(), decode, *samples, std::max<int64_t>(1, steps / 2), lat.mean * 1e6);
    // The first prefill chunk of the prompt, after the depth, three times.
    const std::span<const int32_t> chunk(prompt.data(), std::min<size_t>(prompt.size(), options->prefill_chunk));
    std::vector<vk::ProfiledStep> chunk_samples;
    for (int i = 0; i < 3 && !chunk.empty(); ++i) {
      if (absl::Status s = start(); !s.ok()) return s;
      absl::StatusOr<vk::ProfiledStep> ns = e.ProfilePrefillChunk(chunk);
      if (!ns.ok()) return ns.status();
      chunk_samples.push_back(*std::move(ns));
    }
    if (!chunk_samples.empty()) {
      const double chunk_ms = first.mean * static_cast<double>(chunk.size()) / static_cast<double>(prompt.size());
      prefill_report = runtime::MakeProfile(e.graph(), e.prefill_plan(), chunk_samples,
                                            static_cast<int64_t>(chunk.size()) / 2, chunk_ms * 1e6);
      prefill_report->step = absl::StrCat("a prefill chunk of ", chunk.size(), " tokens");
    }
  }

  if (json_out) {
    nlohmann::json j;
    j["model"] = model_name;
    j["quant"] = quant;
    j["device"] = e.device().info().name;
    j["params"] = params;
    j["model_bytes"] = model_bytes;
    j["weight_bytes_per_token"] = weight_bytes_per_token;
    j["p"] = *p;
    j["n"] = *n;
    j["n_depth"] = *depth;
    j["r"] = *r;
    j["pp_tok_s"] = {{"mean", pp.mean}, {"sd", pp.sd}};
    j["tg_tok_s"] = {{"mean", tg.mean}, {"sd", tg.sd}};
    j["ttft_ms"] = {{"mean", first.mean}, {"sd", first.sd}};
    j["decode_ms"] = {{"p50", Percentile(latencies, 50)}, {"p99", Percentile(latencies, 99)}, {"mean", lat.mean}};
    j["vram_bytes"] = vram;
    j["submits_per_token"] = per_token_submits;
    j["gpu_loop"] = e.gpu_loop();
    j["sampling"] = {{"temperature", sampling->temperature},
                     {"top_k", sampling->top_k},
                     {"top_p", sampling->top_p},
                     {"min_p", sampling->min_p},
                     {"repeat_penalty", sampling->repeat_penalty}};
    j["dispatches_per_token"] = decode.stats().dispatches;
    j["barriers_per_token"] = decode.stats().barriers;
    j["copy_bandwidth_gb_s"] = bandwidth->bytes_per_second / 1e9;
    j["floor_tok_s"] = floor_tok_s;
    j["tg_floor_pct"] = 100.0 * tg.mean / floor_tok_s;
    // Each repetition's figures, in order: an outlier shows which run it was.
    j["per_repetition"] = {{"pp_tok_s", pp_rates}, {"tg_tok_s", tg_rates}, {"ttft_ms", ttft}};
    if (report) j["profile"] = runtime::ProfileJson(*report);
    if (prefill_report) j["prefill_profile"] = runtime::ProfileJson(*prefill_report);
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("model: %s, %s, %.2f M params, %.3f GB weights (%.3f GB read per decode token)\n", model_name.c_str(),
              quant.c_str(), static_cast<double>(params) / 1e6, static_cast<double>(model_bytes) / 1e9,
              static_cast<double>(weight_bytes_per_token) / 1e9);
  std::printf("device: %s\n", e.device().info().name.c_str());
  // llama-bench's labels: "pp512 @ d4096" at a depth.
  const std::string at_depth = *depth > 0 ? absl::StrCat(" @ d", *depth) : "";
  std::printf("pp%lld%s: %.1f ± %.1f tok/s\n", static_cast<long long>(*p), at_depth.c_str(), pp.mean, pp.sd);
  std::printf("tg%lld%s: %.1f ± %.1f tok/s (%s)\n", static_cast<long long>(*n), at_depth.c_str(), tg.mean, tg.sd,
              sampling->temperature > 0
                  ? absl::StrFormat("sampled: temperature %g, top-k %lld, top-p %g, min-p %g", sampling->temperature,
                                    static_cast<long long>(sampling->top_k), sampling->top_p, sampling->min_p)
                        .c_str()
                  : "greedy");
  std::printf("ttft (p=%lld%s): %.2f ± %.2f ms\n", static_cast<long long>(*p),
              *depth > 0 ? absl::StrCat(", d=", *depth).c_str() : "", first.mean, first.sd);
  std::printf("decode latency: p50 %.3f ms, p99 %.3f ms\n", Percentile(latencies, 50), Percentile(latencies, 99));
  std::printf("peak vram: %.1f MiB\n", static_cast<double>(vram) / (1 << 20));
  std::printf("per decode token: %.2f submits (%s), %d dispatches, %d barriers\n", per_token_submits,
              e.gpu_loop() > 1 ? absl::StrCat("a GPU loop of ", e.gpu_loop(), " steps").c_str() : "no GPU loop",
              decode.stats().dispatches, decode.stats().barriers);
  std::printf("copy bandwidth: %.1f GB/s (%zu MiB shader copy, read + write)\n", bandwidth->bytes_per_second / 1e9,
              bandwidth->buffer_bytes >> 20);
  std::printf("bandwidth floor: %.1f tok/s; tg = %.2f%% of the floor\n", floor_tok_s, 100.0 * tg.mean / floor_tok_s);
  std::printf("repetitions: %lld after warm-up runs\n", static_cast<long long>(*r));
  if (report) {
    std::printf("\n%s", runtime::FormatProfile(*report).c_str());
    if (prefill_report) std::printf("\n%s", runtime::FormatProfile(*prefill_report).c_str());
    std::printf("%s", runtime::FormatDriverStatistics({&decode, &e.prefill_plan()}).c_str());
  }
  return 0;
}

}  // namespace doppler::cli
