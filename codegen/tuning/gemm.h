// The tiled matmul's choices (codegen/matmul_gemm.cc renders them).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "codegen/target_caps.h"

namespace doppler::codegen::tuning {

struct GemmConfig {
  int64_t bn = 64;  // tile columns: 64, 32 or 16 (tiles are 64 rows)
  int64_t bk = 32;  // K values staged a round: 32 or 16
};

// Shared memory the kernel declares for a config: x and weight slices as vec4 rows padded by one,
// the partial sums of narrow tiles' groups, and the rows' partial sums of squares. `gates`: 2 for
// a gated weight (two products a column), else 1.
int64_t GemmSharedBytes(const GemmConfig& config, int64_t gates);

// The config for y[m, n] on `caps`, or DOPPLER_TUNE's (gemm.bn, gemm.bk), which must be one of
// the widths above and fit the shared memory.
absl::StatusOr<GemmConfig> ChooseGemm(const TargetCaps& caps, int64_t m, int64_t n, int64_t gates);

}  // namespace doppler::codegen::tuning
