#include "runtime/decode_activations.h"

#include "absl/strings/str_cat.h"
#include "passes/pass.h"

namespace doppler::runtime {

absl::StatusOr<graph::Graph> WithDecodeActivations(graph::Graph g, DecodeActivations want,
                                                   const codegen::TargetCaps& caps, const std::string& device) {
  if (want == DecodeActivations::kF32 || (want == DecodeActivations::kAuto && !caps.integer_dot_product)) return g;
  if (!caps.integer_dot_product) {
    return absl::FailedPreconditionError(
        absl::StrCat("q8 decode activations need integer dot products, which ", device, " does not have (use f32)"));
  }
  absl::StatusOr<std::unique_ptr<passes::Pass>> pass = passes::MakePass("q8-activations");
  if (!pass.ok()) return pass.status();
  absl::StatusOr<bool> changed = (*pass)->Run(g);
  if (!changed.ok()) return changed.status();
  return g;
}

}  // namespace doppler::runtime
