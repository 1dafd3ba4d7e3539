// The attention's choice that follows the device (codegen/emit_attention.cc renders it): from how
// many tokens a prefill bucket takes the cooperative-matrix variant (codegen/attention_coop.h).
#pragma once

#include "codegen/kernel.h"
#include "codegen/tuning/tuning.h"

namespace doppler::codegen::tuning {

// Tokens of a bucket from which one sequence's attention over an f16 cache takes the
// cooperative-matrix variant on `caps`: kCoopMinRows, as the matmuls take their tiles (their f16
// operands keep short prompts off both), or kNever where the device has no cooperative matrices.
DeviceChoice ChooseAttentionCoopFrom(const TargetCaps& caps);

}  // namespace doppler::codegen::tuning
