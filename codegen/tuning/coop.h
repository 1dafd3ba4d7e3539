// The cooperative-matrix matmul's choices (codegen/matmul_coop.cc renders them).
#pragma once

#include <cstdint>
#include <limits>

#include "absl/status/statusor.h"
#include "codegen/target_caps.h"
#include "codegen/tuning/tuning.h"

namespace doppler::codegen::tuning {

// Rows from which the cooperative-matrix variant is used, where the device has it and the weights
// are not f32 (f32 weights keep f32 products). Its f16 operands cost ~1e-3 of relative error, so
// short prompts keep the f32 kernels, exact to the fixtures' 1e-4 of max |logit| (from 5 rows
// it made a 16-token Llama-3.1-8B prefill 116 -> 51 ms on the H100, but its logits 7.6e-4 off).
inline constexpr int64_t kCoopMinRows = 64;

// About one tile a multiprocessor of a large GPU (the H100's and H200's 132): the grids of tiles
// the rules compare with it (ChooseCoop; CoopRowsTakesProduct, codegen/tuning/coop_rows.h).
inline constexpr int64_t kMinTallTiles = 128;

// Whether a gated product of n columns a gate makes more than kMinTallTiles tiles of 64 columns:
// past one wave of them on such a GPU, where a batched decode step's gated product with a norm
// prologue takes wider tiles (at 33 to 64 rows) or the tiles instead of coop_rows (at 17 to 32).
bool GatedGridPastAWave(int64_t n);

// Whether a gated product of m rows and n columns a gate makes between one and two kMinTallTiles of
// tiles of 256 rows by 64 columns (one wave of them at two a multiprocessor), with no more rows
// past m than tiles of 128 rows leave.
bool GatedGridOfOneWaveInTallerTiles(int64_t m, int64_t n);

// The longest rows (K) of a gated product that such a grid takes in 256-row tiles (ChooseCoop).
inline constexpr int64_t kShortGatedK = 2048;

// Rows never reached: a family that does not take the cooperative-matrix units.
inline constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

struct CoopConfig {
  int64_t bm = 128;     // tile rows: 32, 64, 128 or 256
  int64_t bn = 64;      // tile columns: 64 or 128
  int64_t bk = 64;      // K values staged a round: 32 or 64
  int64_t sm = 32;      // rows of the tile one subgroup multiplies: 16, 32 or 64
  int64_t sn = 32;      // its columns: 16, 32 or 64
  // The next slice read into registers while the current one multiplies: 1, or 0 (each slice read
  // as it is staged: fewer registers, more workgroups a multiprocessor)
  int64_t prefetch = 1;
};

// The rows of x from which the matmul takes the cooperative-matrix tiles on `caps` (kNever where
// the device has no cooperative matrices): kCoopMinRows, or in a batched decode step (a row per
// sequence) the rows past the matrix-vector kernels' (codegen/matmul.h: kGemvMaxBucket).
DeviceChoice ChooseCoopFrom(const TargetCaps& caps, bool row_per_sequence);

// Subgroups of 32 invocations a workgroup has: one per sm x sn block of the tile.
int64_t CoopSubgroups(const CoopConfig& config);

// Shared memory the kernel declares: a slice of x and weight rows as f16, rows padded by 8 values
// (the result fragments of the epilogue reuse them), and the rows' norm scales. `gates`: 2 for a
// gated weight (two products a column), else 1.
int64_t CoopSharedBytes(const CoopConfig& config, int64_t gates);

// The config for y[m, n] = x[m, k] · wᵀ (with a norm prologue where `norm`, the products that
// normalise the same x having level_n columns in all, this one's among them: their grid is taken
// together) on `caps`, with DOPPLER_TUNE's values (coop.bm, coop.bn, coop.bk, coop.sm, coop.sn,
// coop.prefetch) in place of the choice's, which must be values above whose staging divides among
// the workgroup's invocations, with at most 1,024 of them, and fit the shared memory.
absl::StatusOr<CoopConfig> ChooseCoop(const TargetCaps& caps, int64_t m, int64_t k, int64_t n, int64_t gates, bool norm,
                                      int64_t level_n);

}  // namespace doppler::codegen::tuning
