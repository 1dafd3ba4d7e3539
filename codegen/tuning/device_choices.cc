#include "codegen/tuning/device_choices.h"

#include "absl/strings/str_cat.h"
#include "codegen/tuning/attention.h"
#include "codegen/tuning/coop.h"
#include "codegen/tuning/coop_rows.h"

namespace doppler::codegen::tuning {
namespace {

std::string Rows(int64_t from, int64_t never, const char* what) {
  return from >= never ? "none" : absl::StrCat("from ", from, " ", what);
}

}  // namespace

absl::StatusOr<std::string> DescribeDeviceChoices(const TargetCaps& caps) {
  absl::StatusOr<DeviceChoice> coop_rows = CoopRowsFrom(caps);
  if (!coop_rows.ok()) return coop_rows.status();
  const DeviceChoice prefill = ChooseCoopFrom(caps, false), batched = ChooseCoopFrom(caps, true);
  const DeviceChoice attention = ChooseAttentionCoopFrom(caps);
  return absl::StrCat("device class ", DeviceClassName(caps.device_class), "\n",
                      "  matmul cooperative-matrix tiles: ", Rows(prefill.value, kNever, "rows"), " (", prefill.reason, ")\n",
                      "  matmul cooperative-matrix tiles in batched decode: ", Rows(batched.value, kNever, "rows"), " (",
                      batched.reason, ")\n",
                      "  attention cooperative-matrix variant: ", Rows(attention.value, kNever, "tokens"), " (",
                      attention.reason, ")\n",
                      "  coop_rows in batched decode: ", Rows(coop_rows->value, kCoopRowsMaxRows + 1, "rows"),
                      coop_rows->value > kCoopRowsMaxRows ? ""
                      : caps.coop_fragments_mma
                          ? absl::StrCat(" to ", kCoopRowsMaxRows, ", products with a norm prologue to ",
                                         kCoopRowsEveryProductRows)
                          : absl::StrCat(" to ", kCoopRowsEveryProductRows),
                      " (", coop_rows->reason, ")\n");
}

}  // namespace doppler::codegen::tuning
