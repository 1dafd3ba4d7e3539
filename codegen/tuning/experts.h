// The expert products' choice (codegen/emit_experts.cc renders it): from how many rows of x a
// product groups its rows by expert.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

namespace doppler::codegen::tuning {

// Rows of x from which an expert product groups its rows (a token's slot each) by expert and
// runs each group as a tiled product, reading an expert's weights once a tile of its rows, instead
// of a matrix-vector pass a row that reads them once a row. Prefill chunks and large mixed steps
// take it; decode steps, whose rows mostly choose different experts, keep the matrix-vector
// kernel, which also sums a token's slots as it goes (codegen/in_matmul.h). 64 is where the dense
// products take their tiles too (kCoopMinRows). Measured (prefill of 512 tokens on the H200:
// gpt-oss-20b 431 → 2,490 tok/s, qwen3-30b-a3b 1,153 → 6,498): bench/RESULTS.md, "issue 32:
// expert products grouped by expert".
inline constexpr int64_t kExpertsGroupedFrom = 64;

// kExpertsGroupedFrom, or DOPPLER_TUNE's experts.grouped_from (at least 1).
absl::StatusOr<int64_t> ExpertsGroupedFrom();

}  // namespace doppler::codegen::tuning
