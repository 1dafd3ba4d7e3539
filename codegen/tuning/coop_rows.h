// The cooperative-matrix matmul for a few rows of x (codegen/matmul_coop_rows.cc renders it): its
// choices, and the rule that sends a batched decode step's products to it.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "codegen/target_caps.h"
#include "codegen/tuning/tuning.h"
#include "graph/dtype.h"

namespace doppler::codegen::tuning {

// Rows of x the variant takes at most: four 16-row fragments (rows from m on count as zero).
inline constexpr int64_t kCoopRowsMaxRows = 64;
// Rows up to which every product takes it: above, only products without a norm prologue whose
// weights are decoded into the fragments (CoopRowsTakesProduct).
inline constexpr int64_t kCoopRowsEveryProductRows = 32;

struct CoopRowsConfig {
  int64_t subgroups = 4;  // subgroups of 32 a workgroup: 1, 2, 4 or 8
  // Subgroups that split K between them (each its own slices, summed once at the end); the
  // workgroup's subgroups / ksplit groups of them take their own columns. Divides subgroups.
  int64_t ksplit = 4;
  int64_t frags = 2;  // columns of y a subgroup takes, in fragments of 16: 1, 2 or 4
  int64_t bk = 32;    // K values a subgroup stages a round: 16, 32 or 64
  // The next slice read into registers while the current one multiplies: 1, or 0 (each slice read
  // as it is staged: fewer registers)
  int64_t prefetch = 1;
  int64_t x_frags = 1;  // fragments of 16 rows of x the step's rows take: ceil(m / 16), not a choice
  // x read from its buffer straight into f32 fragments (1), or staged as f16 with the weights (0):
  // ChooseCoopRows says where.
  int64_t x_direct = 0;
  // x's rows (at most 8) as the columns of 16 × 8 fragments, the product transposed (yᵀ = w · xᵀ,
  // weights the 16 × 16 operand), where the device has the 16 × 8 × 16 shape, so that no product
  // multiplies the zero rows of a 16-row fragment; staged, or read from x's buffer (x_direct)
  // where that holds 8 rows. ChooseCoopRows says where.
  int64_t x8 = 0;
  // The weights decoded straight into the fragments of the transposed product (weight rows × x,
  // the weights the 16 × 16 operand), each lane decoding the values its elements hold, and x read
  // into its fragments by the lanes likewise, in the same order of K within each 32 values: no
  // shared memory before the K split's sums (1); or both staged (0). Where the device's fragments
  // keep the mma layout (TargetCaps::coop_fragments_mma), with slices of 32 or 64 and K a multiple
  // of 8. ChooseCoopRows says where; x8 then says whether x's fragments are 16 × 8 or 16 × 16, and
  // x_direct is 0.
  int64_t w_direct = 0;
  // With w_direct and rounds of two runs or more (bk 64), where the weight format pairs 32-value
  // sub-blocks in the same words (codegen/weight_parts.h: SliceWordsPairSubBlocks), an odd run's
  // slices taken from the even run's words, loaded once (1), or loaded again (0). ChooseCoopRows
  // says where.
  int64_t run_pairs = 0;
  // Workgroups that split K between them for each block of columns: 1, 2, 3 or 4. With more than
  // one, each writes its sums to the dispatch's scratch (codegen/kernel.h) and the last of a block
  // to finish adds them up, in a fixed order, and stores the results: a grid keeps its workgroups
  // while each subgroup takes more columns (frags), so that its x feeds more weights.
  // ChooseCoopRows says where.
  int64_t kgroups = 1;
};

// Columns of y a workgroup computes.
int64_t CoopRowsColumns(const CoopRowsConfig& config);
// The dispatch's scratch for y[m, n] (m the bucket's rows; `gates` as below): none without a K
// split over workgroups, else a counter a block of columns, each workgroup's rows' sums of squares
// and its sums, as f32.
int64_t CoopRowsScratchBytes(const CoopRowsConfig& config, int64_t m, int64_t n, int64_t gates);

// Shared memory the kernel declares: each subgroup's slice of x (16 · x_frags rows, 8 with x8, none
// where x is read into fragments) and its weight rows as f16, rows padded by 8 values (with
// w_direct, room for its result fragments only), and the rows' partial sums of squares. `gates`: 2 for a gated
// weight (two products a column), else 1.
int64_t CoopRowsSharedBytes(const CoopRowsConfig& config, int64_t gates);

// The config for y[m, n] = x[m, k] · wᵀ (m <= kCoopRowsMaxRows) on `caps`, with DOPPLER_TUNE's
// values (coop_rows.subgroups, coop_rows.ksplit, coop_rows.frags, coop_rows.bk, coop_rows.prefetch,
// coop_rows.x_direct, coop_rows.x8, coop_rows.w_direct, coop_rows.run_pairs, coop_rows.kgroups) in
// place of the choice's: values above, whose staging divides among a subgroup's lanes and whose shared memory
// fits the device. `x_whole`: x's buffer holds the m rows from its start (not a last row read from
// a longer x), so that x may be read in fragments where m (or 8 with x8) and k are multiples of 16;
// `norm`: the product has a norm prologue; `w_dtype`: the weights' format.
absl::StatusOr<CoopRowsConfig> ChooseCoopRows(const TargetCaps& caps, int64_t m, int64_t k, int64_t n, int64_t gates,
                                              bool x_whole = true, bool norm = false,
                                              graph::DType w_dtype = graph::DType::kQ4_K);

// The rows from which a batched decode step (a row per sequence) takes this variant on `caps`, up
// to kCoopRowsMaxRows: 4 where the device's fragments keep the mma layout (w_direct), 8 where it
// has cooperative matrices otherwise (fewer rows keep the matrix-vector kernels, faster there),
// else none (kCoopRowsMaxRows + 1). DOPPLER_TUNE's
// coop_rows.from (at least 2) replaces it; above kCoopRowsMaxRows it turns the variant off.
absl::StatusOr<DeviceChoice> CoopRowsFrom(const TargetCaps& caps);

// Whether a batched decode step of `rows` rows takes the variant, from CoopRowsFrom's `from`: the
// rule codegen (codegen/tuning/matmul.h) and the batch engine's choice of decode graph
// (runtime/batch_engine.h: such buckets take the graph without x_quant) share.
inline bool CoopRowsTakeBatchedDecode(int64_t rows, int64_t from) { return rows >= from && rows <= kCoopRowsMaxRows; }

// Whether a product of such a step (`norm`: with a norm prologue; n columns a gate, `gates` 2 for a
// gated weight) takes the variant: every product up to kCoopRowsEveryProductRows but the gated ones
// with a norm prologue of more than 16 rows (two fragments of x) whose grid is past a wave
// (GatedGridPastAWave, codegen/tuning/coop.h); above, up to kCoopRowsMaxRows, only products without
// a norm prologue whose weights are decoded into the fragments (TargetCaps::coop_fragments_mma), the
// tiles taking the others. DOPPLER_TUNE's coop_rows.norm_upto gives the rows up to which every
// product with a norm prologue takes it (above, none; weights staged where the device's fragments
// do not keep the mma layout).
absl::StatusOr<bool> CoopRowsTakesProduct(const TargetCaps& caps, int64_t rows, int64_t n, int64_t gates, bool norm);

}  // namespace doppler::codegen::tuning
