// doppler bench --batch: batched prefill and decode throughput, as llama.cpp's llama-batched-bench
// measures it (-npp P -ntg N -npl LIST): for each batch size B, B sequences of P random prompt
// tokens are prefilled, then decoded N steps together.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/engine.h"
#include "tools/cli_args.h"

namespace doppler::cli {

struct BatchBenchOptions {
  std::vector<int> batches;  // B values, in order
  int64_t prompt = 512, generate = 128, repetitions = 1;
  uint32_t seed = 1;
  bool json = false;
  bool profile = false;  // the last round's profiled decode step at each B, by op kind and kernel
};

// Runs the measurement and prints a table (or one JSON object with a row a B).
absl::StatusOr<int> BenchBatch(runtime::EngineOptions options, const ParsedArgs& args, const BatchBenchOptions& o);

}  // namespace doppler::cli
