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
#include "codegen/tuning/coop.h"
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
// And from which products of more than two fragments of x split K over workgroups (ChooseCoopRows).
constexpr int64_t kLongK = 8192;
// Bits a weight value (Q4_K's 4.5) up to which plain products of two fragments of x on small grids
// take two fragments of columns a subgroup (ChooseCoopRows).
constexpr int64_t kTwoFragsMaxBits = 5;

int64_t RegionBytes(const CoopRowsConfig& c, int64_t gates) {
  if (c.w_direct) return gates * 4 * 256;  // a 16 × 16 result fragment a gate
  return 2 * ((c.x_direct ? 0 : c.x8 ? 8 : 16 * c.x_frags) + gates * 16 * c.frags) * (c.bk + 8);
}

// Why `c` cannot be rendered for `gates` on `caps`, or "" where it can.
std::string Unfit(const CoopRowsConfig& c, int64_t gates, const TargetCaps& caps) {
  if (c.w_direct && c.bk % 32 != 0) return "decode the weights into fragments 32 values of K at a time (slices of 32 or 64)";
  if (c.subgroups % c.ksplit != 0) return "split K among subgroups that do not divide the workgroup's";
  if (32 * c.subgroups > caps.max_workgroup_invocations) {
    return absl::StrCat("make ", 32 * c.subgroups, " invocations; the device takes ", caps.max_workgroup_invocations);
  }
  // The sums of the K split go through each subgroup's region: a fragment (256 floats, or 128 for
  // 16 x 8 ones) a gate.
  if (RegionBytes(c, gates) < gates * 4 * (c.x8 ? 128 : 256)) return "leave no room for the result fragments";
  if (CoopRowsSharedBytes(c, gates) > caps.max_shared_memory) {
    return absl::StrCat("need ", CoopRowsSharedBytes(c, gates), " bytes of shared memory; the device has ",
                        caps.max_shared_memory);
  }
  return "";
}

}  // namespace

int64_t CoopRowsColumns(const CoopRowsConfig& c) { return (c.subgroups / c.ksplit) * 16 * c.frags; }

int64_t CoopRowsScratchBytes(const CoopRowsConfig& c, int64_t m, int64_t n, int64_t gates) {
  if (c.kgroups == 1) return 0;
  return 4 * (CeilDiv(n, CoopRowsColumns(c)) + c.kgroups * m + c.kgroups * gates * m * n);
}

int64_t CoopRowsSharedBytes(const CoopRowsConfig& c, int64_t gates) {
  return c.subgroups * (RegionBytes(c, gates) + 4 * 16 * c.x_frags);
}

absl::StatusOr<CoopRowsConfig> ChooseCoopRows(const TargetCaps& caps, int64_t m, int64_t k, int64_t n, int64_t gates,
                                              bool x_whole, bool norm, graph::DType w_dtype) {
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
                {"bk", {16, 32, 64}, {}}, {"prefetch", {0, 1}, {}}, {"x_direct", {0, 1}, {}}, {"x8", {0, 1}, {}},
                {"w_direct", {0, 1}, {}}, {"run_pairs", {0, 1}, {}}, {"kgroups", {1, 2, 3, 4}, {}}};
  std::vector<std::string> set;
  for (Key& key : keys) {
    absl::StatusOr<std::optional<int64_t>> v = OverrideOneOf("coop_rows", key.name, key.values);
    if (!v.ok()) return v.status();
    if (!*v) continue;
    key.value = *v;
    set.push_back(absl::StrCat("coop_rows.", key.name, "=", **v));
  }
  const std::optional<int64_t> subgroups = keys[0].value, ksplit = keys[1].value, frags = keys[2].value, bk = keys[3].value,
                                 prefetch = keys[4].value, x_direct = keys[5].value, x8 = keys[6].value,
                                 w_direct = keys[7].value, run_pairs = keys[8].value, kgroups = keys[9].value;

  CoopRowsConfig c;
  c.x_frags = CeilDiv(m, 16);
  // Slices of 32: at 8 rows of the 8B a step took 9.9 ms, against 11.1 with 16 and 13.9 with 64
  // (bench/RESULTS.md, "coop_rows").
  c.bk = bk.value_or(32);
  // Reading ahead: 9.9 against 10.8 ms a step at 8 rows (bench/RESULTS.md, "coop_rows"); but see
  // below for two fragments of x on small grids.
  c.prefetch = prefetch.value_or(1);
  // A fragment of columns a subgroup for one fragment of x: at 8 rows of Llama-3.1-8B on the H200
  // a decode step took 10.6 ms with 1, 14.0 with 2 and 22.7 with 4 (bench/RESULTS.md,
  // "coop_rows"); at 16 rows 9.7 against 11.4. Two for two fragments of x, whose staging the
  // columns then share: 13.8 against 14.4 ms at 32 rows (bench/RESULTS.md, "sixth session"). One
  // for four, whose accumulators two would double: at 64 rows the gated product took 10,476 µs a
  // step with two against 8,782 with one, the Q6_K down products 3,279 against 3,205
  // (bench/RESULTS.md, "eleventh session"). But one for two fragments of x where the grid of
  // one-fragment workgroups is at most kSmallGrid, which two would leave fewer workgroups than the
  // H200's 132 multiprocessors: at 32 rows of the 8B its Q6_K down products (128 workgroups of two, 256 of
  // one) took 1,478 µs a step with two against 1,237 with one, its o and Q4_K down products 1,917
  // against 1,883, where the gated product (896 of one) took 4,210 against 4,950 and the LM head
  // 631 against 884 (bench/RESULTS.md, "sixteenth session").
  c.frags = frags.value_or(c.x_frags == 2 && CeilDiv(n, 16) > kSmallGrid ? 2 : 1);  // (1 where the shape would not fit)
  // Two workgroups over K, which keep a grid's workgroups as many with two fragments of columns a
  // subgroup, so that each lane's x feeds twice the weights: for products without gates or a norm
  // of two fragments of x or more on a grid of at most kSmallGrid one-fragment workgroups whose
  // weights are decoded into the fragments. With two fragments of x, two of columns only for
  // weights of at most kTwoFragsMaxBits bits a value (x's share of a lane's work is the larger the
  // cheaper the weights' decoding). At 32 rows of Llama-3.1-8B (µs a step) its o and Q4_K down
  // products took 1,525 with two fragments of columns and two workgroups, 1,851 with one and two,
  // 1,820 with one and one; its Q6_K down products 1,320 with two and two, 1,199 with one and one
  // and 1,133 with one and two; at 64 rows 2,885, 3,719 and 3,234, and 1,756, 2,291 and 2,142
  // (bench/RESULTS.md, "eighteenth session"). Products with a norm lost with two workgroups (the
  // 8B's Q6_K v at 32 rows 392 against 322). At more than two fragments of x (33 to 64 rows), only
  // for a long K (kLongK, the down products): at 64 rows each o product (K of 1,536 to 4,096)
  // was faster with one workgroup, Llama-3.2-1B's 16 taking 322 µs a step against about 410,
  // Llama-3.1-8B's 32 1,380 against about 1,400, whole steps 0.9–3.2% faster on Llama-3.2-1B, 3B,
  // 3.1-8B and Qwen2.5-1.5B (bench/RESULTS.md, "nineteenth session").
  // (Where the weights are decoded into the fragments: c.w_direct below.)
  const bool w_direct_fits = caps.coop_fragments_mma && k % 8 == 0;
  const bool decoded_in_place = w_direct.value_or(w_direct_fits && !x_direct.value_or(0) && c.bk % 32 == 0 ? 1 : 0) == 1;
  if (!frags && !kgroups && gates == 1 && !norm && c.x_frags >= 2 && CeilDiv(n, 16) <= kSmallGrid && decoded_in_place &&
      (c.x_frags == 2 || k >= kLongK)) {
    const graph::DTypeInfo& format = graph::Info(w_dtype);
    c.frags = c.x_frags > 2 || 8 * format.block_bytes <= kTwoFragsMaxBits * format.block_elems ? 2 : 1;
    c.kgroups = 2;
  }
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
  // No read-ahead for two fragments of x where the grid of a product without gates is at most
  // kSmallGrid workgroups: their registers then hold more of the few workgroups a multiprocessor
  // (at 32 rows of Llama-3.1-8B, µs a step: q+k+v (192 workgroups) 788.9 / 393.1 → 649.0 / 322.1,
  // the Q6_K down products (256) 1,242.6 → 1,208.6, the o and Q4_K down ones 1,866.9 → 1,856.6; the
  // LM head (4,008) took 640 → 760 without it). Gated products keep it: Llama-3.2-1B's and 3B's
  // (256) took 612.7 → 921.3 and 1,396.7 → 2,318.3 without (bench/RESULTS.md, "seventeenth
  // session").
  if (!prefetch && gates == 1 && c.x_frags == 2 && CeilDiv(n, CoopRowsColumns(c)) <= kSmallGrid) c.prefetch = 0;
  // x's rows as the columns of 16 × 8 fragments where they are at most 8, so that no product
  // multiplies the zero half of a 16-row fragment: a step of 8 rows of Llama-3.1-8B took 7.83 ms
  // against 8.04 with 16-row fragments staged in the products without gates (its o and Q4_K down
  // products 1,445 µs against 1,518, its LM head 510 against 579), and its gated product, x read
  // from its buffer, 3,525 against 3,831 (bench/RESULTS.md, "ninth session").
  const bool cols8 = caps.coop_matrix_nv_16x8 && m <= 8;
  const bool x8_on = x8.value_or(cols8 ? 1 : 0) == 1;
  if (x8_on && !cols8) {
    return absl::InvalidArgumentError(absl::StrCat("DOPPLER_TUNE: coop_rows.x8=1 needs at most 8 rows and the device's ",
                                                   "16 x 8 x 16 shape (", m, " rows)"));
  }
  // x read into fragments from its buffer, where that holds whole fragments of rows (the bucket's,
  // 16 or 32 rows, or 8 as 16 x 8 ones) and K is a multiple of 16 (no fragment crosses a row's end),
  // for gated weights (two products a staged slice of x): Llama-3.1-8B's gated product took 5,092
  // µs a step of 32 rows against 6,706 staged, where each other product was faster staged (its Q6_K
  // down product 1,463 against 1,837 µs, the o and Q4_K down products 2,112 against 2,254), and a
  // step of 16 rows 9.16 ms against 9.46 (bench/RESULTS.md, "eighth session" and "ninth session").
  const bool direct_fits = x_whole && k % 16 == 0 && (x8_on ? m == 8 : m % 16 == 0);
  if (x_direct.value_or(0) == 1 && !direct_fits) {
    return absl::InvalidArgumentError(absl::StrCat("DOPPLER_TUNE: coop_rows.x_direct=1 needs x's buffer to hold whole ",
                                                   "fragments of rows (16, or 8 with coop_rows.x8) and K a multiple of ",
                                                   "16 (", m, " rows, K ", k, ")"));
  }
  c.x8 = x8_on ? 1 : 0;
  // The weights decoded into fragments where the device keeps the mma layout: a step of 8 rows of
  // Llama-3.1-8B took 6.51 ms against 7.77 with them staged, of 16 rows 7.98 against 9.13, of 32
  // 10.98 against 12.25 (bench/RESULTS.md, "tenth session").
  if (w_direct.value_or(0) == 1 && !w_direct_fits) {
    return absl::InvalidArgumentError(absl::StrCat("DOPPLER_TUNE: coop_rows.w_direct=1 needs a device whose fragments ",
                                                   "keep the mma layout and K a multiple of 8 (K ", k, ")"));
  }
  if (w_direct.value_or(0) == 1 && x_direct.value_or(0) == 1) {
    return absl::InvalidArgumentError("DOPPLER_TUNE: coop_rows.w_direct=1 reads x into fragments itself (x_direct=0)");
  }
  c.w_direct = decoded_in_place ? 1 : 0;
  c.x_direct = c.w_direct ? 0 : x_direct.value_or(direct_fits && gates == 2 ? 1 : 0);
  // Slices of 64 for 16 x 8 fragments decoded in place: a step of 8 rows took 6.02 ms against 6.52
  // with 32, where 16 and 32 rows lost with them (8.44 against 7.98 ms, 13.60 against 11.01).
  if (!bk && c.w_direct && c.x8) c.bk = 64;
  // And for more than two fragments of x decoded in place (33 to 64 rows, the products without a
  // norm, their x in f16: codegen/half_x.h): a step of 64 rows took 16.55 and 16.65 ms against
  // 17.19 and 17.30 with 32 (bench/RESULTS.md, "twelfth session").
  if (!bk && c.w_direct && c.x_frags > 2) c.bk = 64;
  // 8 subgroups over K for one 16 x 16 fragment of x decoded in place: a step of 16 rows took 8.61
  // and 8.62 ms against 8.69 and 8.69 with the rule's 4 for short K and large grids (at 32 rows 4
  // stay: 12.23 ms with 8 against 11.01).
  if (!subgroups && !ksplit && c.w_direct && !c.x8 && c.x_frags == 1) {
    CoopRowsConfig eight = c;
    eight.subgroups = eight.ksplit = 8;
    if (Unfit(eight, gates, caps).empty()) c = eight;
  }
  // An odd run's weight words taken from the even run's, for 16 x 8 fragments of x decoded in place:
  // a step of 8 rows of Llama-3.1-8B took 5.63 ms against 6.08 (its gated product 2,125 µs against
  // 2,447, registers 127 → 94), where four fragments of x (33 to 64 rows) lost: a step of 64 rows
  // took 15.37 ms against 15.08 (the o and Q4_K down products 3,504 µs against 3,223, registers 186
  // → 168) (bench/RESULTS.md, "fifteenth session").
  if (run_pairs.value_or(0) == 1 && !(c.w_direct && c.bk >= 64)) {
    return absl::InvalidArgumentError("DOPPLER_TUNE: coop_rows.run_pairs=1 needs the weights decoded into fragments "
                                      "(coop_rows.w_direct) in rounds of two runs (coop_rows.bk=64)");
  }
  c.run_pairs = run_pairs.value_or(c.w_direct && c.bk >= 64 && c.x8 ? 1 : 0);
  c.kgroups = kgroups.value_or(c.kgroups);
  // (A region without x's rows may leave no room for the result fragments: x staged then.)
  if (!x_direct && c.x_direct && !Unfit(c, gates, caps).empty()) c.x_direct = 0;
  if (const std::string unfit = Unfit(c, gates, caps); !unfit.empty()) {
    const std::string shape = absl::StrCat(c.subgroups, " subgroups, K split ", c.ksplit, " ways, ", c.frags,
                                           " fragments a subgroup, slices of ", c.bk, c.w_direct ? ", weights into fragments" : "",
                                           ", ", gates,
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
  // From 4 rows where the weights are decoded into fragments (w_direct): a step of Llama-3.1-8B took
  // 5.64 ms at 4 rows against the q8 matrix-vector kernels' 7.16, and 5.56 at 2 rows against their
  // 4.01 (bench/RESULTS.md, "tenth session").
  if (caps.coop_fragments_mma) {
    return DeviceChoice{4, ClassReason(caps, DeviceClass::kNvidia, "bench/RESULTS.md, \"tenth session\"")};
  }
  // From 8 rows with the weights staged: a step took about 10 ms at every bucket from 2 to 16 rows,
  // against the q8 matrix-vector kernels' 4.2 ms at 2 rows, 7.3 at 4, 16.5 at 8 and 30.5 at 16 on
  // the H200.
  return DeviceChoice{8, ClassReason(caps, DeviceClass::kNvidia,
                                     "bench/RESULTS.md, \"issue 29: coop_rows, batched decode on the cooperative-matrix "
                                     "units\"")};
}

absl::StatusOr<bool> CoopRowsTakesProduct(const TargetCaps& caps, int64_t rows, int64_t n, int64_t gates, bool norm) {
  // At 64 rows of Llama-3.1-8B the variant took 4,574 µs a step for the o and Q4_K down products
  // and 3,178 for the Q6_K down ones, against the tiles' 6,169 and 5,233, but 8,782 for the gated
  // product with its norm (255 registers) against the tiles' 7,533, and 2,563 and 1,782 for the LM
  // head and q+k+v against 1,394 and 1,199 (bench/RESULTS.md, "eleventh session"): x's reads grow
  // with its rows, the weights' do not, and a norm adds each row's sums of squares to a lane's
  // registers.
  if (!norm) return rows <= kCoopRowsEveryProductRows || caps.coop_fragments_mma;
  absl::StatusOr<std::optional<int64_t>> v = Override("coop_rows", "norm_upto");
  if (!v.ok()) return v.status();
  if (*v) return rows <= **v;
  // At 32 rows the gated product with its norm (243 registers, two workgroups a multiprocessor)
  // took 4,210 µs a step of Llama-3.1-8B, its 448 workgroups in 1.7 waves, against the 32-row
  // tiles' 3,592; on grids within a wave it won (Llama-3.2-1B 614 against 741, Llama-3.2-3B 1,387
  // against 1,891) or tied (Qwen2.5-1.5B, 140 tiles, 1,306 against 1,317), as every other product
  // with a norm did (the 8B's q+k+v and LM head together 2,236 against 2,478; bench/RESULTS.md,
  // "seventeenth session").
  if (gates == 2 && rows > 16 && GatedGridPastAWave(n)) return false;
  return rows <= kCoopRowsEveryProductRows;
}

}  // namespace doppler::codegen::tuning
