#include "codegen/tuning/experts.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/tuning/tuning.h"

namespace doppler::codegen::tuning {

absl::StatusOr<int64_t> ExpertsGroupedFrom() {
  absl::StatusOr<std::optional<int64_t>> v = Override("experts", "grouped_from");
  if (!v.ok()) return v.status();
  if (!v->has_value()) return kExpertsGroupedFrom;
  if (**v < 1) return absl::InvalidArgumentError(absl::StrCat("DOPPLER_TUNE: experts.grouped_from=", **v, " is not at least 1"));
  return **v;
}

}  // namespace doppler::codegen::tuning
