#include "codegen/tuning/device_choices.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "codegen/attention_coop_online.h"
#include "codegen/attention_keys.h"
#include "codegen/tuning/attention.h"
#include "codegen/tuning/coop.h"
#include "codegen/tuning/coop_rows.h"
#include "codegen/tuning/experts.h"

namespace doppler::codegen::tuning {
namespace {

std::string Rows(int64_t from, int64_t never, absl::string_view what) {
  return from >= never ? "none" : absl::StrCat("from ", from, " ", what);
}

}  // namespace

absl::StatusOr<std::string> DescribeDeviceChoices(const TargetCaps& caps) {
  absl::StatusOr<DeviceChoice> coop_rows = CoopRowsFrom(caps);
  if (!coop_rows.ok()) return coop_rows.status();
  // The rows up to which its plain and its normalised products take it, from the rule itself.
  absl::StatusOr<bool> plain_max = CoopRowsTakesProduct(caps, kCoopRowsMaxRows, 0, 1, false),
                       normed_max = CoopRowsTakesProduct(caps, kCoopRowsMaxRows, 0, 1, true),
                       wide_gated = CoopRowsTakesProduct(caps, kCoopRowsEveryProductRows, 64 * (kMinTallTiles + 1), 2, true);
  if (!plain_max.ok()) return plain_max.status();
  if (!normed_max.ok()) return normed_max.status();
  if (!wide_gated.ok()) return wide_gated.status();
  const int64_t plain_to = *plain_max ? kCoopRowsMaxRows : kCoopRowsEveryProductRows;
  const int64_t normed_to = *normed_max ? kCoopRowsMaxRows : kCoopRowsEveryProductRows;
  absl::StatusOr<DeviceChoice> half_dots = ExpertGemvHalfDots(caps);
  if (!half_dots.ok()) return half_dots.status();
  const DeviceChoice prefill = ChooseCoopFrom(caps, false), batched = ChooseCoopFrom(caps, true);
  const DeviceChoice attention = ChooseAttentionCoopFrom(caps), keys = ChooseAttentionKeysFrom(caps, true),
                     keys_as_floats = ChooseAttentionKeysFrom(caps, false);
  return absl::StrCat("device class ", DeviceClassName(caps.device_class), "\n",
                      "  matmul cooperative-matrix tiles: ", Rows(prefill.value, kNever, "rows"), " (", prefill.reason, ")\n",
                      "  matmul cooperative-matrix tiles in batched decode: ", Rows(batched.value, kNever, "rows"), " (",
                      batched.reason, ")\n",
                      "  attention cooperative-matrix variant: ", Rows(attention.value, kNever, "tokens"),
                      attention.value != kNever && caps.coop_accumulators_mma
                          ? absl::StrCat(", in one pass over the keys for heads of at most ", kCoopOnlineMaxHeadDim)
                          : "",
                      " (", attention.reason, ")\n",
                      "  attention keys variant in batched decode: ",
                      Rows(keys.value, kNever,
                           absl::StrCat("workgroups (kv heads x rows) of ", kKeysMinGroup, " to ", kKeysMaxGroup,
                                        " query heads a kv head")),
                      keys_as_floats.value == keys.value || keys_as_floats.value == kNever
                          ? ""
                          : absl::StrCat(", from ", keys_as_floats.value, " where a lane's dimensions are not a quad"),
                      " (", keys.reason, ")\n",
                      "  coop_rows in batched decode: ", Rows(coop_rows->value, kCoopRowsMaxRows + 1, "rows"),
                      coop_rows->value > kCoopRowsMaxRows ? ""
                      : absl::StrCat(" to ", plain_to,
                                     normed_to == plain_to ? "" : absl::StrCat(", products with a norm prologue to ", normed_to),
                                     *wide_gated ? "" : absl::StrCat(" (gated ones to 16 where their ",
                                                                      "64-column tiles are more than ", kMinTallTiles, ")")),
                      " (", coop_rows->reason, ")\n",
                      "  MXFP4 expert products in packed f16: ", half_dots->value == 1 ? "yes" : "no", " (",
                      half_dots->reason, ")\n");
}

}  // namespace doppler::codegen::tuning
