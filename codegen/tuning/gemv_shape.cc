#include "codegen/tuning/gemv_shape.h"

#include <algorithm>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"

namespace doppler::codegen::tuning {
namespace {

// The float kernel (bench/RESULTS.md, "The matrix-vector kernels' shape rules": float kernel).
// A weight row a workgroup per kRowsPerDot rows of the matrix, kMinDots to kMaxDots dot products.
constexpr int64_t kRowsPerDot = 4096, kMinDots = 2, kMaxDots = 4;
constexpr uint32_t kMinWorkgroup = 32, kMaxWorkgroup = 256;

// The q8 kernel (bench/RESULTS.md, "The matrix-vector kernels' shape rules": q8 kernel).
// Dot products a team computes at a time, by the matrix's weights and row length (TeamDots).
constexpr int64_t kSmallMatrix = int64_t{1} << 24, kLongRow = 8192, kLongRowDepth = 2, kWideRow = 4096;
constexpr int64_t kLargeMatrix = int64_t{1} << 27;
// Iterations whose parts a lane keeps in flight (2 and 4 alike), kLongRowDepth for long rows.
constexpr int64_t kDepth = 4;
// Iterations in flight where a team takes its rows' parts as one list.
constexpr int64_t kFlatDepth = 3;
// A lane's accumulators (TM · RN · G floats) at most where flat doubles RN: more cost occupancy.
constexpr int64_t kMaxAccumulators = 64;
constexpr uint32_t kWorkgroup = 256;
// Lanes over all teams that keep the memory busy (fewer for rows of kWideRow values or more, whose
// lanes each take more parts).
constexpr int64_t kTargetLanes = int64_t{1} << 17, kTargetLanesWideRows = int64_t{1} << 16;
// Workgroups a block of rows at most (each stages x), and for Q8_0 matrices of more than
// kLargeMatrix weights (LM heads, whose parts take fewer registers).
constexpr int64_t kMaxWorkgroups = 512, kMaxWorkgroupsQ8_0 = 4096;
// Weight rows a workgroup stages x for at least, widening up to kWidestWorkgroup invocations...
constexpr int64_t kMinStagedRows = 16;
constexpr uint32_t kWidestWorkgroup = 1024;
// ...while the dispatch keeps this many workgroups (about the H100's 132 multiprocessors).
constexpr int64_t kMinWorkgroups = 128, kMinWorkgroupsWideRows = 64;
// Staging steps whose loads are issued together, at most.
constexpr int64_t kStageBatch = 4;
// Shared memory for the staged x of one row, at most (bytes): within every device's 16 KiB and
// NVIDIA's 48, and small enough to keep several workgroups on a multiprocessor; each further row may
// take as much again, within the device's.
constexpr int64_t kStageBytes = 24 * 1024;
// An invocation's share of a restated norm's rows (vectors) it keeps in registers, at most.
constexpr int64_t kHeldQuads = 4;

int64_t TeamDots(const GemvProblem& p, int64_t subgroup_size) {
  const int64_t weights = p.n * p.gates * p.k;
  if (weights <= kSmallMatrix || p.k >= kLongRow) return 1;
  if (weights <= kLargeMatrix) return p.k >= kWideRow ? 2 : 4;
  return p.parts_per_row >= subgroup_size ? 1 : 2;
}

// Of the team's lanes, the share that a list of `parts` parts keeps busy.
double LaneFill(int64_t parts, int64_t team) {
  return static_cast<double>(parts) / static_cast<double>(CeilDiv(parts, team) * team);
}
// Flat doubles the team's output columns where that fills its lanes better.
int64_t FlatColumns(int64_t rn, int64_t gates, int64_t parts_per_row, int64_t team) {
  return LaneFill(2 * rn * gates * parts_per_row, team) > LaneFill(rn * gates * parts_per_row, team) ? 2 * rn : rn;
}

}  // namespace

bool HalfWorkgroupIdlesLess(int64_t items, int64_t width) {
  auto idle = [&](int64_t w) { return CeilDiv(items, w) * w - items; };
  return idle(width) * 8 > items && idle(width / 2) < idle(width);
}

int64_t GemvColumnsPerWorkgroup(const GemvProblem& p, int64_t tm) {
  int64_t dots = kMinDots;
  while (dots * 2 <= kMaxDots && dots * 2 * kRowsPerDot <= p.n * p.gates) dots *= 2;
  return std::max<int64_t>(1, dots / (p.gates * tm));
}

uint32_t GemvWorkgroupSize(const TargetCaps& caps, int64_t workgroups, int64_t row_width, bool whole_row) {
  const uint32_t cap = std::min(kMaxWorkgroup, caps.max_workgroup_invocations);
  uint32_t wg = std::min(kMinWorkgroup, cap);
  while (wg * 2 <= cap && (whole_row || workgroups * wg < kGemvTargetInvocations) && wg < row_width) wg *= 2;
  // Narrower where the last round over a row would leave many idle and the narrower one still
  // keeps half the target in flight.
  while (wg > kMinWorkgroup && HalfWorkgroupIdlesLess(row_width, wg) && workgroups * wg >= kGemvTargetInvocations) {
    wg /= 2;
  }
  return wg;
}

uint32_t FewColumnsWorkgroupSize(const TargetCaps& caps, int64_t parts_per_row) {
  const uint32_t cap = WidestPowerOfTwoWorkgroup(caps, kWidestWorkgroup);
  uint32_t wg = std::min(kMinWorkgroup, cap);
  while (wg < parts_per_row && wg * 2 <= cap) wg *= 2;
  return wg;
}

GemvShape ChooseGemvShape(const TargetCaps& caps, const GemvProblem& p, const GemvConfig& config) {
  GemvShape shape;
  shape.tm = config.rows;
  shape.row_blocks = CeilDiv(p.m, shape.tm);
  shape.rn = config.cols > 0 ? config.cols : GemvColumnsPerWorkgroup(p, shape.tm);
  // A matrix of few columns (a router's logits) would leave most multiprocessors idle: one column a
  // workgroup, each as wide as a row has parts (an invocation a part), so that its invocations take
  // one turn each (GPT-OSS-20B's router at one row and at 16: bench/RESULTS.md, "thirty-fifth
  // session").
  const bool few_columns = config.cols == 0 && CeilDiv(p.n, shape.rn) < kMinWorkgroups;
  if (few_columns) shape.rn = 1;
  // Loads an iteration ahead, but for Q6_K parts (seven registers each) in workgroups of 4 weight
  // rows, where the registers cost more occupancy than the early loads win.
  shape.load_ahead = !(p.w_dtype == graph::DType::kQ6_K && shape.rn * p.gates >= 4);
  shape.groups = CeilDiv(p.n, shape.rn);
  // Narrower where the reduction's sums of many rows (OUTS floats an invocation) would not fit in
  // shared memory.
  const int64_t outs = shape.tm * shape.rn * p.gates + (p.norm ? shape.tm : 0);
  // Float weights for one row of x: as wide as a row's 16-byte loads of weights allow, each
  // invocation taking fewer of them (their registers are few). Counted in loads, not parts, so that
  // parts of four f16 values (8-byte loads) leave an invocation as many bytes as parts of eight:
  // GPT-OSS-20B's LM head (2,880 values a row) took 305 µs at 128 invocations against 336 at 256
  // on the H200 (bench/RESULTS.md, "float parts of four values").
  const bool whole_row = graph::IsFloat(p.w_dtype) && shape.tm == 1;
  const int64_t row_width = whole_row ? CeilDiv(static_cast<int64_t>(graph::ByteSize(p.w_dtype, p.k)), 16) : p.parts_per_row;
  shape.wg = config.wg > 0    ? std::min<uint32_t>(static_cast<uint32_t>(config.wg), caps.max_workgroup_invocations)
             : few_columns ? FewColumnsWorkgroupSize(caps, p.parts_per_row)
                           : GemvWorkgroupSize(caps, shape.groups, row_width, whole_row);
  while (shape.wg > kMinWorkgroup && 4 * outs * shape.wg > caps.max_shared_memory) shape.wg /= 2;
  return shape;
}

absl::StatusOr<GemvQ8Shape> ChooseGemvQ8Shape(const TargetCaps& caps, const GemvProblem& p, const GemvQ8Extras& extras,
                                              const GemvConfig& config) {
  GemvQ8Shape shape;
  const int64_t tm = shape.tm = config.rows;
  shape.row_blocks = CeilDiv(p.m, tm);
  int64_t rn = std::max<int64_t>(1, TeamDots(p, caps.subgroup_size) / (p.gates * tm));
  if (p.gates > 1 && p.parts_per_row % caps.subgroup_size != 0 && tm * 2 * rn * p.gates <= kMaxAccumulators) {
    rn = FlatColumns(rn, p.gates, p.parts_per_row, caps.subgroup_size);
  }
  uint32_t wg = WidestPowerOfTwoWorkgroup(caps, kWorkgroup);
  // Teams of subgroups need every subgroup full and of the size the kernel is built for.
  const uint32_t sg = caps.subgroup_size;
  const bool subgroup_teams =
      caps.subgroup_arithmetic && sg == caps.min_subgroup_size && sg >= tm * rn && sg <= wg && wg % sg == 0;
  uint32_t team = wg;
  if (subgroup_teams) {
    // Enough lanes over all row groups, but no more than a row has parts.
    const int64_t lanes = CeilDiv(p.n, rn) * int64_t{sg};
    team = sg;
    const int64_t target = p.k >= kWideRow ? kTargetLanesWideRows : kTargetLanes;
    while (team * 2 <= wg && lanes * (team / sg) < target && team * 2 <= p.parts_per_row) team *= 2;
  } else {
    // One team a workgroup, shaped as the float kernel's workgroups.
    rn = GemvColumnsPerWorkgroup(p, tm);
    wg = team = GemvWorkgroupSize(caps, CeilDiv(p.n, rn), p.parts_per_row, /*whole_row=*/false);
  }
  // Rows: groups of RN output columns, RG_PER_TEAM groups a team (one where x is staged in segments,
  // which are staged again for every group).
  const int64_t row_groups = CeilDiv(p.n, rn);
  // Each workgroup stages its block's TM rows of x, so a block's workgroups stage the bucket's m rows
  // over all blocks: fewer of them for more rows, while each block's fill the GPU (teams of
  // subgroups; a team of the whole workgroup takes as many row groups as with one row).
  const int64_t max_workgroups =
      subgroup_teams && config.workgroups > 0
          ? config.workgroups
          : std::max<int64_t>(kMinWorkgroups, (p.w_dtype == graph::DType::kQ8_0 && p.n * p.gates * p.k > kLargeMatrix
                                                   ? kMaxWorkgroupsQ8_0
                                                   : kMaxWorkgroups) /
                                                  (subgroup_teams ? p.m : 1));
  auto groups_per_team = [&](uint32_t teams) {
    return std::max<int64_t>(1, CeilDiv(row_groups, teams * max_workgroups));
  };
  if (subgroup_teams) {
    // Wider workgroups where a workgroup would stage x for few weight rows.
    const uint32_t widest = WidestPowerOfTwoWorkgroup(caps, kWidestWorkgroup);
    auto rows = [&](uint32_t w) { return (w / team) * rn * p.gates * tm * groups_per_team(w / team); };
    auto workgroups_of = [&](uint32_t w) { return CeilDiv(row_groups, (w / team) * groups_per_team(w / team)); };
    const int64_t min_workgroups = p.k >= kWideRow ? kMinWorkgroupsWideRows : kMinWorkgroups;
    while (wg * 2 <= widest && rows(wg) < kMinStagedRows && workgroups_of(wg * 2) >= min_workgroups) wg *= 2;
  }

  // x's staging: SEG values of each of the TM rows, 1 byte each plus a float per 32, in what shared
  // memory the reductions leave (red, wg_scratch, xam, ...: floats an invocation each).
  const int64_t per_value = tm * 9;  // eighths of a byte
  // Values of each row a segment takes for workgroups of w invocations (0: not even 256).
  auto segment_of = [&](uint32_t w) -> int64_t {
    const int64_t reduce_bytes =
        4 * (tm * rn * p.gates + tm + (extras.shuffle_blocks ? 0 : 2) + (extras.argmax_tail ? 2 : 0)) * int64_t{w};
    const int64_t stage_budget = std::min<int64_t>(
        kStageBytes * tm, static_cast<int64_t>(caps.max_shared_memory) - reduce_bytes - extras.decoder_shared_bytes);
    if (p.k * per_value <= stage_budget * 8) return p.k;
    return std::max<int64_t>(0, stage_budget * 8 / per_value / 256 * 256);  // whole superblocks of the K-quants
  };
  auto segments_of = [&](uint32_t w) {
    const int64_t seg = segment_of(w);
    return seg == 0 ? std::numeric_limits<int64_t>::max() : int64_t{CeilDiv(p.k, seg)};
  };
  // Narrower while that stages x in fewer segments, or while no segment fits at all (the
  // reductions' shared memory grows with the rows and the invocations); a team as wide as the
  // workgroup narrows with it, to a subgroup.
  const uint32_t narrowest = std::max<uint32_t>(subgroup_teams ? sg : 32, 8);
  while (wg / 2 >= narrowest && (segment_of(wg) == 0 || segments_of(wg / 2) < segments_of(wg))) {
    wg /= 2;
    team = std::min(team, wg);
  }
  if (wg % 8 != 0) {
    return absl::InternalError(absl::StrCat("x_quant: workgroups of ", wg, " cannot stage x by blocks of 8 invocations"));
  }
  const uint32_t teams = wg / team;
  const int64_t seg = segment_of(wg);
  if (seg == 0) {
    return absl::ResourceExhaustedError(absl::StrCat("x_quant: ", caps.max_shared_memory,
                                                     " bytes of shared memory cannot stage 256 values of ", tm,
                                                     tm == 1 ? " row" : " rows", " of x"));
  }
  const int64_t segments = CeilDiv(p.k, seg);
  const int64_t steps = CeilDiv(seg / 4, wg);
  if (extras.restate && segments > 1) {
    return absl::ResourceExhaustedError(absl::StrCat("x_quant: ", caps.max_shared_memory,
                                                     " bytes of shared memory cannot stage ", tm, " rows of ", p.k,
                                                     " values for the norm it computes"));
  }
  const int64_t seg_parts = seg / p.part_values;
  const uint32_t iters = CeilDiv(seg_parts, team);

  shape.rn = rn;
  shape.wg = wg;
  shape.team = team;
  shape.subgroup_teams = subgroup_teams;
  shape.subs = subgroup_teams ? team / sg : 1;
  shape.row_groups = row_groups;
  shape.seg = seg;
  shape.segments = segments;
  shape.steps = steps;
  shape.batch = std::min(steps, kStageBatch);
  shape.iters = iters;
  shape.depth = std::min<int64_t>(config.depth > 0 ? config.depth : p.k >= kLongRow ? kLongRowDepth : kDepth, iters);
  // Flat: the team's rows' parts as one list, where a row's parts leave lanes idle.
  shape.flat = segments == 1 && seg_parts % team != 0 && rn * p.gates > 1;
  shape.flat_iters = CeilDiv(rn * p.gates * seg_parts, team);
  shape.flat_depth = std::min(shape.flat_iters, config.depth > 0 ? config.depth : kFlatDepth);
  shape.rg_per_team = segments == 1 ? groups_per_team(teams) : 1;
  shape.workgroups = CeilDiv(row_groups, teams * shape.rg_per_team);
  shape.hold_restated = tm * steps <= kHeldQuads;
  return shape;
}

}  // namespace doppler::codegen::tuning
