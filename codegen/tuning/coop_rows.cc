#include "codegen/tuning/coop_rows.h"

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/emitters.h"
#include "codegen/tuning/tuning.h"

namespace doppler::codegen::tuning {
namespace {

// The largest grid whose workgroups take 8 subgroups (4 otherwise): up to two workgroups a
// multiprocessor of an H200's 132 leave it few subgroups in flight (the 8B's output projection,
// 256 workgroups, took 30.0 µs a layer at 16 rows with 4 subgroups, about 21.5 with 8); a grid of
// 384 lost with 8 (the 8B's q/k/v, 35.4 → 41.9 µs) (bench/RESULTS.md, "seventh session").
constexpr int64_t kSmallGrid = 256;
// K from which a workgroup takes 8 subgroups: a long reduction (a down projection, K = 14,336)
// then has a workgroup's weight reads spread over more of them in flight at once: to be measured.
constexpr int64_t kLongK = 8192;

int64_t RegionBytes(const CoopRowsConfig& c, int64_t gates) {
  return 2 * ((c.x_direct ? 0 : 16 * c.x_frags) + gates * 16 * c.frags) * (c.bk + 8);
}

// Why `c` cannot be rendered for `gates` on `caps`, or "" where it can.
std::string Unfit(const CoopRowsConfig& c, int64_t gates, const TargetCaps& caps) {
  if (c.subgroups % c.ksplit != 0) return "split K among subgroups that do not divide the workgroup's";
  if (32 * c.subgroups > caps.max_workgroup_invocations) {
    return absl::StrCat("make ", 32 * c.subgroups, " invocations; the device takes ", caps.max_workgroup_invocations);
  }
  // The sums of the K split go through each subgroup's region: a fragment (256 floats) a gate.
  if (RegionBytes(c, gates) < gates * 1024) return "leave no room for the result fragments";
  if (CoopRowsSharedBytes(c, gates) > caps.max_shared_memory) {
    return absl::StrCat("need ", CoopRowsSharedBytes(c, gates), " bytes of shared memory; the device has ",
                        caps.max_shared_memory);
  }
  return "";
}

}  // namespace

int64_t CoopRowsColumns(const CoopRowsConfig& c) { return (c.subgroups / c.ksplit) * 16 * c.frags; }

int64_t CoopRowsSharedBytes(const CoopRowsConfig& c, int64_t gates) {
  return c.subgroups * (RegionBytes(c, gates) + 4 * 16 * c.x_frags);
}

absl::StatusOr<CoopRowsConfig> ChooseCoopRows(const TargetCaps& caps, int64_t m, int64_t k, int64_t n, int64_t gates,
                                              bool x_whole) {
  if (m > kCoopRowsMaxRows) {
    return absl::InvalidArgumentError(
        absl::StrCat("cooperative-matrix rows variant: ", m, " rows of x; it takes at most ", kCoopRowsMaxRows));
  }
  // DOPPLER_TUNE's values first: the choices below are made around them.
  struct Key {
    const char* name;
    std::initializer_list<int64_t> values;
    std::optional<int64_t> value;
  };
  Key keys[] = {{"subgroups", {1, 2, 4, 8}, {}}, {"ksplit", {1, 2, 4, 8}, {}}, {"frags", {1, 2, 4}, {}},
                {"bk", {16, 32, 64}, {}}, {"prefetch", {0, 1}, {}}, {"x_direct", {0, 1}, {}}, {"x8", {0, 1}, {}}};
  std::vector<std::string> set;
  for (Key& key : keys) {
    absl::StatusOr<std::optional<int64_t>> v = OverrideOneOf("coop_rows", key.name, key.values);
    if (!v.ok()) return v.status();
    if (!*v) continue;
    key.value = *v;
    set.push_back(absl::StrCat("coop_rows.", key.name, "=", **v));
  }
  const std::optional<int64_t> subgroups = keys[0].value, ksplit = keys[1].value, frags = keys[2].value, bk = keys[3].value,
                                 prefetch = keys[4].value, x_direct = keys[5].value, x8 = keys[6].value;

  CoopRowsConfig c;
  c.x_frags = CeilDiv(m, 16);
  // Slices of 32: at 8 rows of the 8B a step took 9.9 ms, against 11.1 with 16 and 13.9 with 64
  // (bench/RESULTS.md, "coop_rows").
  c.bk = bk.value_or(32);
  // Reading ahead: 9.9 against 10.8 ms a step at 8 rows (bench/RESULTS.md, "coop_rows").
  c.prefetch = prefetch.value_or(1);
  // A fragment of columns a subgroup for one fragment of x: at 8 rows of Llama-3.1-8B on the H200
  // a decode step took 10.6 ms with 1, 14.0 with 2 and 22.7 with 4 (bench/RESULTS.md,
  // "coop_rows"); at 16 rows 9.7 against 11.4. Two for two fragments of x, whose staging the
  // columns then share: 13.8 against 14.4 ms at 32 rows (bench/RESULTS.md, "sixth session").
  c.frags = frags.value_or(c.x_frags >= 2 ? 2 : 1);  // (1 where the shape would not fit)
  // Every subgroup of a workgroup takes its own slices of K over the same columns (unless
  // chosen): each slice of x is staged once a workgroup and each weight value decoded by one
  // subgroup (a column split stages x once a column group). 4 subgroups, 8 for a long K or a grid
  // of at most kSmallGrid workgroups (more of the few workgroups' weight reads in flight) where their
  // regions fit: at 8 rows of the 8B 9.9 ms a step, against 10.9 with 8 everywhere and 14.1 with 2
  // (bench/RESULTS.md, "coop_rows").
  c.subgroups = 4;
  c.ksplit = ksplit.value_or(4);
  if (k >= kLongK || CeilDiv(n, 16 * c.frags) <= kSmallGrid) {
    CoopRowsConfig eight = c;
    eight.subgroups = 8;
    eight.ksplit = ksplit.value_or(8);
    if (Unfit(eight, gates, caps).empty()) c = eight;
  }
  c.subgroups = subgroups.value_or(c.subgroups);
  c.ksplit = ksplit.value_or(c.subgroups);
  if (!frags && c.frags > 1 && !Unfit(c, gates, caps).empty()) c.frags = 1;  // two fragments of x in a chosen shape
  // x read into fragments from its buffer, where that holds whole fragments of rows (the bucket's,
  // a multiple of 16) and K is a multiple of 16 (no fragment crosses a row's end), for gated
  // weights (two products a staged slice of x): Llama-3.1-8B's gated product took 5,092 µs a step
  // of 32 rows against 6,706 staged, where each other product was faster staged (its Q6_K down
  // product 1,463 against 1,837 µs, the o and Q4_K down products 2,112 against 2,254), and a step of
  // 16 rows 9.16 ms against 9.46 (bench/RESULTS.md, "eighth session" and "ninth session").
  const bool x_fragments = x_whole && m % 16 == 0 && k % 16 == 0;
  // x as the columns of 16 × 8 fragments where x's buffer holds 8 rows, so that no product
  // multiplies the zero half of a 16-row fragment: taken, as x read into fragments above, for gated
  // weights (Llama-3.1-8B's gated product 3,525 µs a step of 8 rows against 3,831 staged, where the
  // o and Q4_K down products took 1,578 against 1,518, the q/k/v 546 against 501; bench/RESULTS.md,
  // "ninth session").
  const bool x_cols8 = caps.coop_matrix_nv_16x8 && x_whole && m == 8 && k % 16 == 0;
  // (At 8 rows, x read into fragments means into 16 × 8 ones.)
  const bool want8 = x_cols8 && x8.value_or(x_direct.value_or(gates == 2 ? 1 : 0)) == 1;
  if (x_direct.value_or(0) == 1 && !x_fragments && !want8) {
    return absl::InvalidArgumentError(absl::StrCat("DOPPLER_TUNE: coop_rows.x_direct=1 needs x's buffer to hold whole ",
                                                   "fragments of rows and K a multiple of 16 (", m, " rows, K ", k, ")"));
  }
  if (x8.value_or(0) == 1 && !(x_cols8 && x_direct.value_or(1) == 1)) {
    return absl::InvalidArgumentError(absl::StrCat("DOPPLER_TUNE: coop_rows.x8=1 needs x's buffer to hold 8 rows, K a ",
                                                   "multiple of 16, x read into fragments and the device's 16 x 8 x 16 ",
                                                   "shape (", m, " rows, K ", k, ")"));
  }
  if (want8 && x_direct.value_or(1) == 1) {
    CoopRowsConfig cols8 = c;
    cols8.x8 = cols8.x_direct = 1;
    if (x8 || x_direct || Unfit(cols8, gates, caps).empty()) c = cols8;
  } else if (x_direct) {
    c.x_direct = *x_direct;
  } else if (x_fragments && gates == 2) {
    CoopRowsConfig direct = c;
    direct.x_direct = 1;
    if (Unfit(direct, gates, caps).empty()) c = direct;
  }
  if (const std::string unfit = Unfit(c, gates, caps); !unfit.empty()) {
    const std::string shape = absl::StrCat(c.subgroups, " subgroups, K split ", c.ksplit, " ways, ", c.frags,
                                           " fragments a subgroup, slices of ", c.bk, ", ", gates,
                                           gates == 2 ? " gates" : " gate");
    if (set.empty()) {
      return absl::FailedPreconditionError(absl::StrCat("cooperative-matrix rows variant: ", shape, ": ", unfit));
    }
    return absl::InvalidArgumentError(absl::StrCat("DOPPLER_TUNE: ", absl::StrJoin(set, ", "), " (", shape, ") ", unfit));
  }
  return c;
}

absl::StatusOr<DeviceChoice> CoopRowsFrom(const TargetCaps& caps) {
  absl::StatusOr<std::optional<int64_t>> v = Override("coop_rows", "from");
  if (!v.ok()) return v.status();
  if (*v && **v < 2) {
    return absl::InvalidArgumentError(absl::StrCat("DOPPLER_TUNE: coop_rows.from=", **v,
                                                   " is below 2 (a single row keeps the matrix-vector kernels)"));
  }
  if (!caps.coop_matrix_nv) return DeviceChoice{kCoopRowsMaxRows + 1, "the device has no cooperative matrices"};
  if (*v) return DeviceChoice{**v, "DOPPLER_TUNE's coop_rows.from"};
  // From 8 rows: a step of Llama-3.1-8B took about 10 ms at every bucket from 2 to 16 rows, against
  // the q8 matrix-vector kernels' 4.2 ms at 2 rows, 7.3 at 4, 16.5 at 8 and 30.5 at 16 on the H200.
  return DeviceChoice{8, ClassReason(caps, DeviceClass::kNvidia,
                                     "bench/RESULTS.md, \"issue 29: coop_rows, batched decode on the cooperative-matrix "
                                     "units\"")};
}

}  // namespace doppler::codegen::tuning
