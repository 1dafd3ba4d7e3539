// The choices that follow the device rather than a problem's shape, one line each with its value
// and its reason, for `doppler run -v` (and the batched engine's): what the device's class and
// capabilities made codegen/tuning/ choose.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "codegen/target_caps.h"

namespace doppler::codegen::tuning {

// "device class NAME\n" and a line a choice: the matmul's cooperative-matrix tiles (prefill and
// batched decode), the attention's cooperative-matrix variant, the cooperative-matrix variant for
// few rows and MXFP4's expert products in f16 pairs, each "  family: value (reason)\n". An error
// where DOPPLER_TUNE is.
absl::StatusOr<std::string> DescribeDeviceChoices(const TargetCaps& caps);

}  // namespace doppler::codegen::tuning
