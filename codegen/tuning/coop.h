// The cooperative-matrix matmul's choices (codegen/matmul_coop.cc renders them).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "codegen/kernel.h"

namespace doppler::codegen::tuning {

struct CoopConfig {
  int64_t bm = 128;     // tile rows: 64, 128 or 256
  int64_t bn = 64;      // tile columns: 64 or 128
  int64_t bk = 64;      // K values staged a round: 32 or 64
  int64_t sm = 32;      // rows of the tile one subgroup multiplies: 16, 32 or 64
  int64_t sn = 32;      // its columns: 16, 32 or 64
  // The next slice read into registers while the current one multiplies: 1, or 0 (each slice read
  // as it is staged: fewer registers, more workgroups a multiprocessor)
  int64_t prefetch = 1;
};

// Subgroups of 32 invocations a workgroup has: one per sm x sn block of the tile.
int64_t CoopSubgroups(const CoopConfig& config);

// Shared memory the kernel declares: a slice of x and weight rows as f16, rows padded by 8 values
// (the result fragments of the epilogue reuse them), and the rows' norm scales. `gates`: 2 for a
// gated weight (two products a column), else 1.
int64_t CoopSharedBytes(const CoopConfig& config, int64_t gates);

// The config for y[m, n] (with a norm prologue where `norm`) on `caps`, with DOPPLER_TUNE's values
// (coop.bm, coop.bn, coop.bk, coop.sm, coop.sn, coop.prefetch) in place of the choice's, which must
// be values above whose staging divides among the workgroup's invocations, with at most 1,024 of
// them, and fit the shared memory.
absl::StatusOr<CoopConfig> ChooseCoop(const TargetCaps& caps, int64_t m, int64_t n, int64_t gates, bool norm);

}  // namespace doppler::codegen::tuning
