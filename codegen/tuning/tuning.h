// Tuning as data: each kernel family's choices live in a config struct of its own, chosen by one
// function per family in this folder from the target's capabilities and the problem's sizes, each
// choice with a one-line reason citing bench/RESULTS.md. The emitters render a config and decide
// nothing else.
//
// DOPPLER_TUNE="family.key=value,..." overrides a choice without rebuilding (say
// DOPPLER_TUNE=gemm.bn=32,gemm.bk=16); the chosen values show in the kernel's variant, which
// `doppler run -v` prints. An unknown key, a malformed entry or a value the family cannot take is
// an error naming the entry.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace doppler::codegen::tuning {

// The value DOPPLER_TUNE gives `family.key`, if any (read from the environment on every call, so
// that a test can set it). Every entry is checked against the keys the families know, whichever
// family asks.
absl::StatusOr<std::optional<int64_t>> Override(absl::string_view family, absl::string_view key);

}  // namespace doppler::codegen::tuning
