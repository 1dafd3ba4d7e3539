#include "codegen/tuning/experts.h"

#include <algorithm>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/tuning/gemv_shape.h"
#include "codegen/tuning/tuning.h"

namespace doppler::codegen::tuning {

absl::StatusOr<int64_t> ExpertsGroupedFrom() {
  absl::StatusOr<std::optional<int64_t>> v = OverrideAtLeast("experts", "grouped_from", 1);
  if (!v.ok()) return v.status();
  return v->value_or(kExpertsGroupedFrom);
}

absl::StatusOr<int64_t> PlainNormInExpertsUpTo() {
  absl::StatusOr<std::optional<int64_t>> v = OverrideAtLeast("experts", "norm_upto", 0);
  if (!v.ok()) return v.status();
  return v->value_or(kPlainNormInExpertsUpTo);
}

absl::StatusOr<bool> ExpertsTakeQ8(const TargetCaps& caps, graph::DType dtype, int64_t x_width) {
  absl::StatusOr<std::optional<int64_t>> v = OverrideOneOf("experts", "q8", {0, 1});
  if (!v.ok()) return v.status();
  const bool wanted = v->has_value() ? **v == 1 : dtype != graph::DType::kMXFP4;
  const int64_t shared = caps.max_shared_memory;
  return wanted && Q8StagedBytes(x_width) <= std::min(shared / 2, shared - kExpertGemvSharedBesidesX);
}

absl::StatusOr<int64_t> ExpertGemvQ8LeastWorkgroup() {
  absl::StatusOr<std::optional<int64_t>> v = OverrideOneOf("experts", "q8_wg", {8, 32, 64, 128, 256});
  if (!v.ok()) return v.status();
  return v->value_or(8);
}

int64_t Q8StagedBytes(int64_t values) { return values + 4 * ((values + 31) / 32); }

absl::StatusOr<int64_t> ExpertGemvBlockPart() {
  absl::StatusOr<std::optional<int64_t>> v = OverrideOneOf("experts", "part", {8, 32});
  if (!v.ok()) return v.status();
  return v->value_or(kExpertGemvBlockPart);
}

absl::StatusOr<DeviceChoice> ExpertGemvHalfDots(const TargetCaps& caps) {
  absl::StatusOr<std::optional<int64_t>> v = OverrideOneOf("experts", "half", {0, 1});
  if (!v.ok()) return v.status();
  if (*v) return DeviceChoice{**v, "DOPPLER_TUNE experts.half"};
  if (!caps.float16_arithmetic) return DeviceChoice{0, "the device has no f16 arithmetic"};
  return DeviceChoice{1, ClassReason(caps, DeviceClass::kNvidia,
                                     "bench/RESULTS.md, \"thirty-fourth session\": gpt-oss-20b 457.4 -> 489.2 tok/s")};
}

uint32_t ExpertGemvWorkgroup(const TargetCaps& caps, int64_t items, int64_t cols) {
  const int64_t unit = caps.subgroup_arithmetic ? caps.subgroup_size : 1;
  auto whole = [&](int64_t n) {
    if (caps.subgroup_arithmetic) return (n + unit - 1) / unit * unit;
    int64_t pow2 = 1;
    while (pow2 < n) pow2 *= 2;
    return pow2;
  };
  int64_t wg = whole(std::min(items, kExpertGemvMaxWorkgroup));
  while (wg / 2 >= unit && whole(wg / 2) == wg / 2 && HalfWorkgroupIdlesLess(items, wg)) wg /= 2;
  wg = whole(std::max(wg, cols));
  return caps.subgroup_arithmetic ? std::min(static_cast<uint32_t>(wg), caps.max_workgroup_invocations)
                                  : WidestPowerOfTwoWorkgroup(caps, static_cast<uint32_t>(wg));
}

absl::StatusOr<ExpertGemvConfig> ChooseExpertGemv(const TargetCaps& caps, int64_t items, int64_t column_workgroups) {
  ExpertGemvConfig c;
  const int64_t workgroup = ExpertGemvWorkgroup(caps, items, 1);
  c.cols = kExpertGemvMaxCols;
  while (c.cols > 1 && column_workgroups / c.cols * workgroup < kExpertGemvMinInvocations) c.cols /= 2;
  absl::StatusOr<std::optional<int64_t>> cols = OverrideOneOf("experts", "cols", {1, 2, 4, 8, 16});
  if (!cols.ok()) return cols.status();
  c.cols = cols->value_or(c.cols);
  return c;
}

}  // namespace doppler::codegen::tuning
