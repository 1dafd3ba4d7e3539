// Tuning as data: each kernel family's choices live in a config struct of its own, chosen by one
// function per family in this folder from the target's capabilities and the problem's sizes, each
// choice with a one-line reason citing bench/RESULTS.md. The emitters render a config and decide
// nothing else.
//
// Choices that follow the device rather than a problem (whether a family takes the
// cooperative-matrix units, and from how many rows) also say which device class
// (codegen/device_class.h) they were measured on: every measurement so far is NVIDIA's (an H100 or
// H200) or lavapipe's, so on AMD, Intel and generic devices a choice is the portable default, the
// same rule from their capabilities, not measured there. `doppler run -v` prints them
// (device_choices.h).
//
// DOPPLER_TUNE="family.key=value,..." overrides a choice without rebuilding (say
// DOPPLER_TUNE=gemm.bn=32,gemm.bk=16); the chosen values show in the kernel's variant, which
// `doppler run -v` prints. An unknown key, a malformed entry or a value the family cannot take is
// an error naming the entry.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "codegen/target_caps.h"

namespace doppler::codegen::tuning {

// The value DOPPLER_TUNE gives `family.key`, if any (read from the environment on every call, so
// that a test can set it). Every entry is checked against the keys the families know, whichever
// family asks.
absl::StatusOr<std::optional<int64_t>> Override(absl::string_view family, absl::string_view key);
// Override's value, which must be one of `allowed` (else an error naming the entry and them).
absl::StatusOr<std::optional<int64_t>> OverrideOneOf(absl::string_view family, absl::string_view key,
                                                     std::initializer_list<int64_t> allowed);

// Override's value, which must be at least `least` (else an error naming the entry).
absl::StatusOr<std::optional<int64_t>> OverrideAtLeast(absl::string_view family, absl::string_view key, int64_t least);

// A choice that follows the device, and why it holds there.
struct DeviceChoice {
  int64_t value = 0;
  std::string reason;
};

// Why a rule measured on `measured_on` (`where`: a section of bench/RESULTS.md) holds on `caps`'
// device: the measurement on that class, else "portable default, not measured on CLASS".
std::string ClassReason(const TargetCaps& caps, DeviceClass measured_on, absl::string_view where);

}  // namespace doppler::codegen::tuning
