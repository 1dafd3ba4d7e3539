#include "codegen/tuning/tuning.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace doppler::codegen::tuning {
namespace {

// Every key a family lets DOPPLER_TUNE set (a new tunable choice adds its key here).
const std::vector<std::string>& KnownKeys() {
  static const std::vector<std::string> keys = {"gemm.bn", "gemm.bk", "coop.bm", "coop.bn", "coop.bk", "coop.sm",
                                                "coop.sn", "coop.prefetch", "gemv.rows", "gemv.cols", "gemv.wg", "gemv.float_part", "gemv_q8.rows",
                                                "gemv_q8.workgroups", "gemv_q8.iq4_pairs", "gemv_q8.q4_0_signed",
                                                "gemv_q8.iq4_xs_part", "gemv_q8.q4_0_part", "gemv_q8.depth", "coop_rows.subgroups",
                                                "coop_rows.ksplit", "coop_rows.frags", "coop_rows.bk", "coop_rows.prefetch",
                                                "coop_rows.x_direct", "coop_rows.x8", "coop_rows.w_direct", "coop_rows.run_pairs", "coop_rows.kgroups",
                                                "coop_rows.from", "coop_rows.norm_upto", "attention.nsg", "attention.keys",
                                                "attention.key_lanes", "attention.key_ahead", "attention.splits", "attention.split_keys", "attention.coop_online", "attention.coop_keys",
                                                "matmul.tail", "matmul.norm_in_x", "matmul.plain_norm_in_x", "matmul.last_row_in_x", "matmul.half_x", "matmul.planes_x",
                                                "matmul.route_sum", "matmul.top_k", "experts.grouped_from", "experts.norm_upto", "experts.cols", "experts.part", "experts.half", "experts.q8", "experts.q8_wg"};
  return keys;
}

}  // namespace

absl::StatusOr<std::optional<int64_t>> Override(absl::string_view family, absl::string_view key) {
  const char* env = std::getenv("DOPPLER_TUNE");
  if (env == nullptr) return std::nullopt;
  const std::string wanted = absl::StrCat(family, ".", key);
  std::optional<int64_t> value;
  for (absl::string_view entry : absl::StrSplit(env, ',', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);
    std::vector<absl::string_view> kv = absl::StrSplit(entry, '=');
    for (absl::string_view& part : kv) part = absl::StripAsciiWhitespace(part);
    int64_t v = 0;
    if (kv.size() != 2 || !absl::SimpleAtoi(kv[1], &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("DOPPLER_TUNE: '", entry, "' is not family.key=integer (e.g. gemm.bn=32)"));
    }
    const std::vector<std::string>& known = KnownKeys();
    if (std::find(known.begin(), known.end(), kv[0]) == known.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("DOPPLER_TUNE: unknown key '", kv[0], "' (known: ", absl::StrJoin(known, ", "), ")"));
    }
    if (kv[0] == wanted) value = v;
  }
  return value;
}

absl::StatusOr<std::optional<int64_t>> OverrideOneOf(absl::string_view family, absl::string_view key,
                                                     std::initializer_list<int64_t> allowed) {
  absl::StatusOr<std::optional<int64_t>> tuned = Override(family, key);
  if (!tuned.ok() || !*tuned) return tuned;
  if (std::find(allowed.begin(), allowed.end(), **tuned) == allowed.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DOPPLER_TUNE: ", family, ".", key, "=", **tuned, " is not one of ", absl::StrJoin(allowed, ", ")));
  }
  return tuned;
}

absl::StatusOr<std::optional<int64_t>> OverrideAtLeast(absl::string_view family, absl::string_view key, int64_t least) {
  absl::StatusOr<std::optional<int64_t>> tuned = Override(family, key);
  if (!tuned.ok() || !*tuned) return tuned;
  if (**tuned < least) {
    return absl::InvalidArgumentError(absl::StrCat("DOPPLER_TUNE: ", family, ".", key, "=", **tuned, " is not at least ", least));
  }
  return tuned;
}

std::string ClassReason(const TargetCaps& caps, DeviceClass measured_on, absl::string_view where) {
  if (caps.device_class == measured_on) return absl::StrCat("measured on ", DeviceClassName(measured_on), ": ", where);
  return absl::StrCat("portable default, not measured on ", DeviceClassName(caps.device_class), " (",
                      DeviceClassName(measured_on), "'s rule: ", where, ")");
}

}  // namespace doppler::codegen::tuning
