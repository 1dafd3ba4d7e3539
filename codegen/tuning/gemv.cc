#include "codegen/tuning/gemv.h"

#include <algorithm>
#include <initializer_list>

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

// IQ4's table of nibble pairs in 16 replicas (16 KiB), where it fits beside the rows' staging: per
// 32 weights half the shared-memory loads of the nibble grids and about 40% fewer integer
// operations, at about 2-way bank conflicts (bench/RESULTS.md, "IQ4's grid as a table of nibble
// pairs": counts of the kernels' instructions, awaiting the GPU's A/B).
constexpr int64_t kIQ4PairReplicas = 16;

// DOPPLER_TUNE's value of family.key, if any, into `field`; it must be one of `allowed`.
absl::Status OverrideOneOf(absl::string_view family, absl::string_view key, std::initializer_list<int64_t> allowed,
                           int64_t& field) {
  absl::StatusOr<std::optional<int64_t>> tuned = tuning::OverrideOneOf(family, key, allowed);
  if (!tuned.ok()) return tuned.status();
  if (*tuned) field = **tuned;
  return absl::OkStatus();
}

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
  absl::StatusOr<GemvConfig> config =
      WithOverride("gemv", m, std::max<int64_t>(1, kXRegisters / std::max<int64_t>(1, part_values)));
  if (!config.ok()) return config;
  if (absl::Status s = OverrideOneOf("gemv", "cols", {1, 2, 4, 8, 16}, config->cols); !s.ok()) return s;
  if (absl::Status s = OverrideOneOf("gemv", "wg", {32, 64, 128, 256, 512, 1024}, config->wg); !s.ok()) return s;
  return config;
}

absl::StatusOr<int64_t> GemvFloatPart(int64_t m, graph::DType w_dtype, bool restated) {
  absl::StatusOr<std::optional<int64_t>> v = tuning::OverrideOneOf("gemv", "float_part", {4, 8});
  if (!v.ok()) return v.status();
  return v->value_or(m == 1 && w_dtype != graph::DType::kF32 && !restated ? 4 : 8);
}

absl::StatusOr<GemvConfig> ChooseGemvQ8(int64_t m, int64_t k, const GemvQ8Weights& weights) {
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
  const bool iq4 = weights.dtype == graph::DType::kIQ4_NL || weights.dtype == graph::DType::kIQ4_XS;
  if (iq4 && weights.shuffles && config->rows * k * 9 / 8 + kIQ4PairReplicas * 1024 <= kOneSegmentBytes) {
    config->iq4_pairs = kIQ4PairReplicas;
  }
  // Q4_0's quants as signed bytes take as many operations as unsigned ones and no sum of x
  // (bench/RESULTS.md, "IQ4's grid as a table of nibble pairs").
  config->q4_0_signed = weights.dtype == graph::DType::kQ4_0 ? 1 : 0;
  // IQ4_XS keeps parts of one sub-block (32 values): parts of two were slower on the H200 with either
  // lookup (bench/RESULTS.md, "IQ4's grid as a table of nibble pairs").
  if (absl::Status s = OverrideOneOf("gemv_q8", "iq4_pairs", {0, 1, 2, 4, 8, 16, 32}, config->iq4_pairs); !s.ok()) return s;
  if (absl::Status s = OverrideOneOf("gemv_q8", "q4_0_signed", {0, 1}, config->q4_0_signed); !s.ok()) return s;
  if (absl::Status s = OverrideOneOf("gemv_q8", "iq4_xs_part", {32, 64}, config->iq4_xs_part); !s.ok()) return s;
  if (absl::Status s = OverrideOneOf("gemv_q8", "q4_0_part", {32, 64}, config->q4_0_part); !s.ok()) return s;
  if (absl::Status s = OverrideOneOf("gemv_q8", "depth", {1, 2, 3, 4, 5, 6, 7, 8}, config->depth); !s.ok()) return s;
  if (k % 64 != 0) config->q4_0_part = 32;
  if (iq4 && config->iq4_pairs > 0 && !weights.shuffles) {
    return absl::InvalidArgumentError(absl::StrCat("DOPPLER_TUNE: gemv_q8.iq4_pairs=", config->iq4_pairs,
                                                   " stages x in pairs through subgroup shuffles, which the device lacks"));
  }
  return config;
}

}  // namespace doppler::codegen::tuning
