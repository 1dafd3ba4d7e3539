#include "codegen/kernel.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"

namespace doppler::codegen {

namespace {

absl::StatusOr<Kernel> EmitOne(const EmitContext& c) {
  using graph::OpKind;
  const graph::Node& node = c.node;
  switch (node.kind) {
    case OpKind::kEmbedding:
      return EmitEmbedding(c);
    case OpKind::kMatMul:
      return EmitMatMul(c);
    case OpKind::kAdd:
    case OpKind::kMul:
    case OpKind::kSilu:
    case OpKind::kGeluTanh:
    case OpKind::kScale:
    case OpKind::kClampedSwiglu:
      return EmitElementwise(c);
    case OpKind::kRmsNorm:
      return EmitRmsNorm(c);
    case OpKind::kRope:
      return EmitRope(c);
    case OpKind::kCacheWrite:
      return EmitCacheWrite(c);
    case OpKind::kLastRow:
      return EmitLastRow(c);
    case OpKind::kArgmax:
      return EmitArgmax(c);
    case OpKind::kRecordTokens:
      return EmitRecordTokens(c);
    case OpKind::kRepeatPenalty:
      return EmitRepeatPenalty(c);
    case OpKind::kSample:
      return EmitSample(c);
    case OpKind::kTopK:
      return EmitTopK(c);
    case OpKind::kRouteWeights:
      return EmitRouteWeights(c);
    case OpKind::kExpertMatMul:
      return EmitExpertMatMul(c);
    case OpKind::kRouteSum:
      return EmitRouteSum(c);
    case OpKind::kAttention:
      return EmitAttention(c);
    case OpKind::kPart:        // a view of its parent's buffer
    case OpKind::kConcatRows:  // materialised at load
    case OpKind::kInput:
    case OpKind::kParam:
    case OpKind::kConst:
    case OpKind::kState:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("no kernel for ", graph::OpName(node.kind), " node '", node.label, "'"));
}

}  // namespace

absl::StatusOr<Kernel> EmitKernel(const graph::Graph& g, const graph::Node& node, const TargetCaps& caps, int64_t tokens) {
  return EmitOne(EmitContext{g, node, caps, tokens});
}

}  // namespace doppler::codegen
