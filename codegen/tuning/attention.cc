#include "codegen/tuning/attention.h"

#include "codegen/tuning/coop.h"

namespace doppler::codegen::tuning {

DeviceChoice ChooseAttentionCoopFrom(const TargetCaps& caps) {
  if (!caps.coop_matrix_nv) return {kNever, "the device has no cooperative matrices"};
  // Llama-3.2-1B's prefill attention 7.4 → 1.4 ms on the H100.
  return {kCoopMinRows, ClassReason(caps, DeviceClass::kNvidia,
                                    "bench/RESULTS.md, \"issue 7, third session: loads in flight, fewer dispatches, "
                                    "prefill on the tensor units\"")};
}

}  // namespace doppler::codegen::tuning
