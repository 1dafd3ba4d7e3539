// One emitter per kernel family. Each returns the kernel of one node; kernel.cc picks the family.
#pragma once

#include "absl/status/statusor.h"
#include "codegen/kernel.h"
#include "codegen/weight_parts.h"

namespace doppler::codegen {

struct EmitContext {
  const graph::Graph& g;
  const graph::Node& node;
  const TargetCaps& caps;
  int64_t tokens;  // the plan's token bucket

  const graph::Node& input(int i) const { return g.node(node.inputs[static_cast<size_t>(i)]); }
  // Rows of a [rows, cols] value, resolved for the bucket.
  int64_t rows(const graph::Node& n) const { return n.type.shape[0].Resolve(tokens); }
};

absl::StatusOr<Kernel> EmitEmbedding(const EmitContext& c);
absl::StatusOr<Kernel> EmitMatMul(const EmitContext& c);
absl::StatusOr<Kernel> EmitElementwise(const EmitContext& c);  // add, mul (with row broadcast), silu, gelu_tanh, scale
absl::StatusOr<Kernel> EmitRmsNorm(const EmitContext& c);
// An RMSNorm node's row, for its own kernel and for the kernel of a matmul whose last workgroup
// computes it (a tail: codegen/in_matmul.h): buffers at the bindings named below (but x, which
// the caller declares: `io.x[i]` reads it) and `void norm_row(uint row, uint group)`, run by a
// whole workgroup of `wg` invocations with WorkgroupReductions' wg_sum declared.
struct NormRowIo {
  uint32_t out;
  std::string x;  // the name of the float array holding the norm's input
  uint32_t w, r, wp;
};
std::string RmsNormRowGlsl(const EmitContext& c, const NormRowIo& io, uint32_t wg);
absl::StatusOr<Kernel> EmitRope(const EmitContext& c);
absl::StatusOr<Kernel> EmitCacheWrite(const EmitContext& c);
// An attention's dispatch; an appending one only where AttentionAppendsItself (kernel.h).
absl::StatusOr<Kernel> EmitAttention(const EmitContext& c);
absl::StatusOr<Kernel> EmitLastRow(const EmitContext& c);
absl::StatusOr<Kernel> EmitArgmax(const EmitContext& c);
absl::StatusOr<Kernel> EmitRecordTokens(const EmitContext& c);
absl::StatusOr<Kernel> EmitRepeatPenalty(const EmitContext& c);
absl::StatusOr<Kernel> EmitSample(const EmitContext& c);
// Mixture of experts (codegen/emit_router.cc, codegen/emit_experts.cc).
absl::StatusOr<Kernel> EmitTopK(const EmitContext& c);
absl::StatusOr<Kernel> EmitRouteWeights(const EmitContext& c);
absl::StatusOr<Kernel> EmitExpertMatMul(const EmitContext& c);
// The parts the expert products' matrix-vector kernel takes of a weight of `dtype` with rows of
// `kdim` values, against x rounded through q8 blocks (`q8`) or float x, MXFP4's whole blocks in f16
// pairs where `half_dots` (tuning::ExpertGemvHalfDots), as tuned (codegen/tuning/experts.h).
absl::StatusOr<WeightParts> ExpertGemvParts(graph::DType dtype, int64_t kdim, bool q8, bool half_dots);
absl::StatusOr<Kernel> EmitRouteSum(const EmitContext& c);

// ceil(a / b)
inline uint32_t CeilDiv(int64_t a, int64_t b) { return static_cast<uint32_t>((a + b - 1) / b); }

// The widest workgroup of a power-of-two size (for tree reductions) up to `limit` invocations that
// the device allows.
inline uint32_t WidestPowerOfTwoWorkgroup(const TargetCaps& caps, uint32_t limit) {
  uint32_t wg = 1;
  while (wg * 2 <= limit && wg * 2 <= caps.max_workgroup_invocations) wg *= 2;
  return wg;
}

// A grid of at least `count` workgroups along x, folded into y above 32768 (the x limit is only
// guaranteed to be 65535). Workgroup i is gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
// the kernel skips i >= count.
inline std::array<uint32_t, 3> WideGrid(uint32_t count) {
  constexpr uint32_t kMaxX = 32768;
  return count <= kMaxX ? std::array<uint32_t, 3>{count, 1, 1} : std::array<uint32_t, 3>{kMaxX, CeilDiv(count, kMaxX), 1};
}

}  // namespace doppler::codegen
