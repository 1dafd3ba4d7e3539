#include "codegen/tuning/gemv.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "codegen/emitters.h"
#include "codegen/tuning/tuning.h"

namespace doppler::codegen::tuning {
namespace {

// Floats of x an invocation of the float kernel holds for one part of every row: the budget that
// kernel had at 4 rows of 16-value parts; more would cost occupancy (bench/RESULTS.md,
// "Matrix-vector kernels for up to 16 rows").
constexpr int64_t kXRegisters = 64;

// `rows`, or the family's override of it, used for at most m rows.
absl::StatusOr<GemvConfig> WithOverride(absl::string_view family, int64_t m, int64_t rows) {
  absl::StatusOr<std::optional<int64_t>> tuned = Override(family, "rows");
  if (!tuned.ok()) return tuned.status();
  if (*tuned) {
    if (**tuned < 1 || **tuned > kGemvRowsLimit) {
      return absl::InvalidArgumentError(
          absl::StrCat("DOPPLER_TUNE: ", family, ".rows=", **tuned, " is not between 1 and ", kGemvRowsLimit));
    }
    rows = **tuned;
  }
  return GemvConfig{std::clamp<int64_t>(std::min(rows, m), 1, kGemvRowsLimit)};
}

}  // namespace

absl::StatusOr<GemvConfig> ChooseGemv(int64_t m, int64_t part_values) {
  return WithOverride("gemv", m, std::max<int64_t>(1, kXRegisters / std::max<int64_t>(1, part_values)));
}

absl::StatusOr<GemvConfig> ChooseGemvQ8(int64_t m, int64_t k) {
  const int64_t fit = std::clamp<int64_t>(kOneSegmentBytes * 8 / (9 * std::max<int64_t>(1, k)), 1, kGemvRowsLimit);
  const int64_t blocks = CeilDiv(m, fit);
  absl::StatusOr<GemvConfig> config = WithOverride("gemv_q8", m, CeilDiv(m, blocks));
  if (!config.ok()) return config;
  absl::StatusOr<std::optional<int64_t>> workgroups = Override("gemv_q8", "workgroups");
  if (!workgroups.ok()) return workgroups.status();
  if (*workgroups) {
    if (**workgroups < 1 || **workgroups > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("DOPPLER_TUNE: gemv_q8.workgroups=", **workgroups, " is not between 1 and 65535"));
    }
    config->workgroups = **workgroups;
  }
  return config;
}

}  // namespace doppler::codegen::tuning
