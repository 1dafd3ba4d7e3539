#include "codegen/tuning/coop.h"

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/emitters.h"
#include "codegen/tuning/gemv.h"
#include "codegen/tuning/tuning.h"

namespace doppler::codegen::tuning {
namespace {

int64_t StagedBytes(const CoopConfig& c, int64_t gates) { return 2 * (c.bm + gates * c.bn) * (c.bk + 8); }

// Why `c` cannot be rendered for `gates` on `caps`, or "" where it can.
std::string Unfit(const CoopConfig& c, int64_t gates, const TargetCaps& caps) {
  if (c.sm > c.bm || c.sn > c.bn) return "a subgroup's block is larger than the tile";
  const int64_t subgroups = CoopSubgroups(c), invocations = 32 * subgroups;
  if (invocations > caps.max_workgroup_invocations) {
    return absl::StrCat("make ", invocations, " invocations; the device takes ", caps.max_workgroup_invocations);
  }
  // x: 4 values a lane, BK / 4 lanes a row; weights: runs of 8.
  if (c.bm * c.bk % (4 * invocations) != 0 || c.bm % (subgroups * (128 / c.bk)) != 0 ||
      c.bn * c.bk % (8 * invocations) != 0) {
    return absl::StrCat("do not divide a slice's staging among ", invocations, " invocations");
  }
  if (32 * 256 * subgroups > 8 * StagedBytes(c, gates)) return "leave no room for the result fragments";
  if (CoopSharedBytes(c, gates) > caps.max_shared_memory) {
    return absl::StrCat("need ", CoopSharedBytes(c, gates), " bytes of shared memory; the device has ",
                        caps.max_shared_memory);
  }
  return "";
}

}  // namespace

DeviceChoice ChooseCoopFrom(const TargetCaps& caps, bool row_per_sequence) {
  if (!caps.coop_matrix_nv) return {kNever, "the device has no cooperative matrices"};
  if (row_per_sequence) {
    // A batched decode step takes the tiles from past the matrix-vector kernels' rows: its products
    // are bound by the tiles' K loop, where the f32 tiled kernel took 2.6 times as long at 32 rows
    // as the coop one at 64 (at 32 rows Llama-3.1-8B's products 49.3 → 25.1 ms a step).
    return {kGemvRowsLimit + 1, ClassReason(caps, DeviceClass::kNvidia,
                                            "bench/RESULTS.md, \"issue 29: batched decode over the paged KV cache\"")};
  }
  return {kCoopMinRows, ClassReason(caps, DeviceClass::kNvidia,
                                    "bench/RESULTS.md, \"The cooperative-matrix matmul (prefill of 64 rows or more)\"")};
}

bool GatedGridPastAWave(int64_t n) { return CeilDiv(n, 64) > kMinTallTiles; }

bool GatedGridOfOneWaveInTallerTiles(int64_t m, int64_t n) {
  const int64_t tiles = int64_t{CeilDiv(n, 64)} * CeilDiv(m, 256);
  return 2 * CeilDiv(m, 256) == CeilDiv(m, 128) && tiles > kMinTallTiles && tiles <= 2 * kMinTallTiles;
}

int64_t CoopSubgroups(const CoopConfig& c) { return (c.bm / c.sm) * (c.bn / c.sn); }

int64_t CoopSharedBytes(const CoopConfig& c, int64_t gates) { return StagedBytes(c, gates) + 4 * c.bm; }

absl::StatusOr<CoopConfig> ChooseCoop(const TargetCaps& caps, int64_t m, int64_t k, int64_t n, int64_t gates, bool norm,
                                      int64_t level_n) {
  CoopConfig c;
  // 128-row tiles of the level's products that normalise the same x, this one's among them.
  const int64_t tall_tiles = int64_t{CeilDiv(std::max(n, level_n), c.bn)} * CeilDiv(m, 128);
  // Rows: 128 unless the grid of 128-row tiles (the level's, with those of the products beside it)
  // would be small (kMinTallTiles), so that narrow matrices (a value projection, 512 columns) still
  // fill the GPU (bench/RESULTS.md, "The cooperative-matrix matmul": Llama-3.2-1B's v projection 85
  // → 71 µs), or m fills no more than 64 of them (a batch of 64 rows: the rest of a tall tile would
  // idle).
  c.bm = m > 64 && tall_tiles >= kMinTallTiles ? 128 : 64;
  // The measurements behind the rules below: bench/RESULTS.md, "issue 29, item 4: tile shapes of
  // the cooperative-matrix matmul" (Llama-3.1-8B and Llama-3.2-1B, 512-token prefill, µs a
  // dispatch, on the H200).
  bool bk_chosen = false, bn_chosen = false, sn_chosen = false;
  // Plain products on a grid large even in 256-row tiles (8B output projections 191 → 155, down
  // projections 589 / 698 → 498 / 504), and short gated products whose grid of 256-row tiles is one
  // wave at two workgroups a multiprocessor (at 512 rows, 512 tiles of 128 rows: 1B gate and up, K
  // 2,048, 266 → 249 µs; 3B's, K 3,072, lose with them, 373 → 392, as do the 8B's at 256 rows:
  // bench/RESULTS.md, "twenty-first session"): 256-row tiles of 64 x 32 blocks, each weight decoded
  // half as often, each fragment of weights feeding four products, and no read-ahead, so that two
  // workgroups share a multiprocessor.
  const bool plain_large = gates == 1 && !norm && m > 128 && int64_t{CeilDiv(n, c.bn)} * CeilDiv(m, 256) >= kMinTallTiles;
  const bool gated_short = gates == 2 && c.bm == 128 && k <= kShortGatedK && GatedGridOfOneWaveInTallerTiles(m, n);
  if (plain_large || gated_short) {
    c.bm = 256;
    c.sm = 64;
    c.prefetch = 0;
  } else if (gates == 2 && c.bm == 128) {
    // Gated products: 64 x 32 blocks on slices of 32, whose registers the read-ahead still fits
    // (8B gate and up projections 1,082 → 1,035; 1B 319 → 302).
    c.sm = 64;
    c.bk = 32;
    bk_chosen = true;
  } else if (norm && c.bm == 128 && tall_tiles >= 2 * kMinTallTiles) {
    // Normalised products on a grid of at least two tiles a multiprocessor: 64 x 32 blocks on
    // slices of 32 without read-ahead (8B q/k/v 304 → 228; on smaller grids, no read-ahead lost:
    // 1B q/k/v 111 → 120).
    c.sm = 64;
    c.bk = 32;
    c.prefetch = 0;
    bk_chosen = true;
  } else if (norm && gates == 1 && c.bm == 128 && tall_tiles > kMinTallTiles) {
    // Normalised products of between one and two waves of 128 x 64 tiles (one a multiprocessor):
    // tiles of 128 columns, one wave (at 512 rows: 1B q+k and its v, 192 tiles, their level 97 → 78
    // µs, its q+k+v 100 → 73; the 8B's, 384 tiles, take the rule above: bench/RESULTS.md,
    // "twenty-first session").
    c.bn = 128;
  } else if (norm && m <= 64) {
    // Normalised products of at most 64 rows (those of a batched decode step that coop_rows leaves
    // to the tiles, a short chunk's): 32 x 16 blocks, eight subgroups a tile, whose few workgroups
    // then keep more loads in flight (Llama-3.1-8B at 64 rows, µs a step: gate+up 7,302 → 5,578, LM
    // head 1,391 → 1,318, q+k+v 1,158 / 627 → 1,074 / 534; bench/RESULTS.md, "eleventh session").
    // Plain products at these rows, measured nowhere with them, keep 32 x 32.
    c.sn = 16;
    // Gated ones where the 64-column grid is more than kMinTallTiles (GatedGridPastAWave): a
    // multiprocessor holds one 64 x 64 workgroup of eight subgroups, so such a grid runs in two
    // waves, the second part empty. Above 32 rows, tiles of 128 columns (sixteen subgroups; 1.65
    // times the time for twice the columns) take one wave (at 64 rows, µs a step: Llama-3.1-8B's
    // gate+up, 224 tiles, 5,480 → 4,529; Qwen2.5-1.5B's, 140, 1,942 → 1,590; Llama-3.2-1B's, 128,
    // 757 → 1,178; bench/RESULTS.md, "sixteenth session"). At most 32 rows (the products coop_rows
    // leaves to the tiles there: codegen/tuning/coop_rows.h), 32 x 64 tiles of four subgroups, each
    // block all the rows, several workgroups a multiprocessor (at 32 rows, Llama-3.1-8B's gate+up
    // 3,592, against 3,967 on 32 x 128 tiles of eight and 4,210 with coop_rows; bench/RESULTS.md,
    // "seventeenth session").
    if (gates == 2 && GatedGridPastAWave(n)) {
      if (m > 32) {
        c.bn = 128;
      } else {
        c.bm = 32;
        c.sm = 32;
      }
    }
  }

  struct Key {
    const char* name;
    int64_t* field;
    std::initializer_list<int64_t> values;
  };
  std::vector<std::string> set;
  for (const Key& k : {Key{"bm", &c.bm, {32, 64, 128, 256}}, Key{"bn", &c.bn, {64, 128}}, Key{"bk", &c.bk, {32, 64}},
                       Key{"sm", &c.sm, {16, 32, 64}}, Key{"sn", &c.sn, {16, 32, 64}},
                       Key{"prefetch", &c.prefetch, {0, 1}}}) {
    absl::StatusOr<std::optional<int64_t>> v = OverrideOneOf("coop", k.name, k.values);
    if (!v.ok()) return v.status();
    if (!*v) continue;
    *k.field = **v;
    bk_chosen |= k.field == &c.bk;
    bn_chosen |= k.field == &c.bn;
    sn_chosen |= k.field == &c.sn;
    set.push_back(absl::StrCat("coop.", k.name, "=", **v));
  }
  // K-slices of 64 where they fit, unless chosen: each round waits on its loads' latency, which
  // longer slices halve (bench/RESULTS.md, "The cooperative-matrix matmul": gate+up 413 → 342 µs on
  // the H100).
  auto choose_bk = [&] {
    if (bk_chosen) return;
    c.bk = 64;
    if (!Unfit(c, gates, caps).empty()) c.bk = 32;
  };
  choose_bk();
  // Wide tiles only where they fit (the device's invocations and shared memory).
  if (!bn_chosen && c.bn == 128 && !Unfit(c, gates, caps).empty()) {
    c.bn = 64;
    choose_bk();
  }
  // 32 x 16 blocks only where the tile (a chosen one too) divides among their subgroups.
  if (!sn_chosen && c.sn == 16 && !Unfit(c, gates, caps).empty()) {
    c.sn = 32;
    choose_bk();
  }
  if (const std::string unfit = Unfit(c, gates, caps); !unfit.empty()) {
    const std::string shape = absl::StrCat("tile ", c.bm, "x", c.bn, ", subgroups of ", c.sm, "x", c.sn, ", slices of ",
                                           c.bk, ", prefetch ", c.prefetch, ", ", gates, gates == 2 ? " gates" : " gate");
    if (set.empty()) return absl::FailedPreconditionError(absl::StrCat("cooperative-matrix matmul: ", shape, ": ", unfit));
    return absl::InvalidArgumentError(absl::StrCat("DOPPLER_TUNE: ", absl::StrJoin(set, ", "), " (", shape, ") ", unfit));
  }
  return c;
}

}  // namespace doppler::codegen::tuning
