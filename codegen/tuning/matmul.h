// Which matmul variant a product takes (codegen/emit_matmul.cc renders the one chosen): the rule
// over the variants' own choices (coop.h, coop_rows.h, gemv.h).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "codegen/target_caps.h"
#include "graph/dtype.h"

namespace doppler::codegen::tuning {

enum class MatMulVariant {
  kGemvQ8,    // matrix-vector, x rounded through q8 blocks (attr x_quant), integer dot products
  kCoopRows,  // cooperative matrices for a few rows, streaming the weights (batched decode)
  kGemv,      // matrix-vector, up to kGemvRowsLimit rows
  kCoop,      // cooperative-matrix tiles (prefill)
  kGemm,      // float tiles
};

struct MatMulProblem {
  int64_t rows = 0;  // rows of x for the plan's bucket
  int64_t n = 0;     // columns of y (a gate's, for a gated weight)
  int64_t gates = 1;  // 2 for a gated weight
  graph::DType w_dtype = graph::DType::kF32;
  bool x_q8 = false;             // attr x_quant: only the q8 matrix-vector variant takes it
  bool row_per_sequence = false;  // a batched decode step's graph (graph::Paging)
  bool norm = false;              // a norm prologue (x times a norm weight, each row scaled)
};

// x_q8 takes the q8 matrix-vector variant; else a batched decode step of rows coop_rows takes
// (CoopRowsFrom, DOPPLER_TUNE's coop_rows.from; above 32 rows, CoopRowsTakesProduct), then up to
// kGemvRowsLimit rows the matrix-vector one, then the cooperative-matrix tiles from the rows
// ChooseCoopFrom gives (not for f32 weights, which keep f32 products), else the float tiles.
absl::StatusOr<MatMulVariant> ChooseMatMulVariant(const TargetCaps& caps, const MatMulProblem& p);

}  // namespace doppler::codegen::tuning
