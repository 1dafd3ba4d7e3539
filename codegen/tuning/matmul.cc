#include "codegen/tuning/matmul.h"

#include "codegen/tuning/coop.h"
#include "codegen/tuning/coop_rows.h"
#include "codegen/tuning/gemv.h"

namespace doppler::codegen::tuning {

absl::StatusOr<MatMulVariant> ChooseMatMulVariant(const TargetCaps& caps, const MatMulProblem& p) {
  if (p.x_q8) return MatMulVariant::kGemvQ8;
  const bool float_weights = p.w_dtype == graph::DType::kF32;
  absl::StatusOr<DeviceChoice> coop_rows_from = CoopRowsFrom(caps);
  if (!coop_rows_from.ok()) return coop_rows_from.status();
  if (p.row_per_sequence && !float_weights && CoopRowsTakeBatchedDecode(p.rows, coop_rows_from->value)) {
    absl::StatusOr<bool> takes = CoopRowsTakesProduct(caps, p.rows, p.n, p.gates, p.norm);
    if (!takes.ok()) return takes.status();
    if (*takes) return MatMulVariant::kCoopRows;
  }
  if (p.rows <= kGemvRowsLimit) return MatMulVariant::kGemv;
  if (!float_weights && p.rows >= ChooseCoopFrom(caps, p.row_per_sequence).value) return MatMulVariant::kCoop;
  return MatMulVariant::kGemm;
}

}  // namespace doppler::codegen::tuning
