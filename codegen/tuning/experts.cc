#include "codegen/tuning/experts.h"

#include <algorithm>
#include <initializer_list>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/tuning/tuning.h"

namespace doppler::codegen::tuning {

absl::StatusOr<int64_t> ExpertsGroupedFrom() {
  absl::StatusOr<std::optional<int64_t>> v = Override("experts", "grouped_from");
  if (!v.ok()) return v.status();
  if (!v->has_value()) return kExpertsGroupedFrom;
  if (**v < 1) return absl::InvalidArgumentError(absl::StrCat("DOPPLER_TUNE: experts.grouped_from=", **v, " is not at least 1"));
  return **v;
}

absl::StatusOr<ExpertGemvConfig> ChooseExpertGemv(int64_t column_workgroups, int64_t workgroup) {
  ExpertGemvConfig c;
  c.cols = kExpertGemvMaxCols;
  while (c.cols > 1 && column_workgroups / c.cols * workgroup < kExpertGemvTargetInvocations) c.cols /= 2;
  absl::StatusOr<std::optional<int64_t>> cols = Override("experts", "cols");
  if (!cols.ok()) return cols.status();
  if (*cols) {
    const std::initializer_list<int64_t> allowed = {1, 2, 4, 8, 16};
    if (std::find(allowed.begin(), allowed.end(), **cols) == allowed.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("DOPPLER_TUNE: experts.cols=", **cols, " is not one of ", absl::StrJoin(allowed, ", ")));
    }
    c.cols = **cols;
  }
  return c;
}

}  // namespace doppler::codegen::tuning
