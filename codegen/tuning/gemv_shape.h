// The matrix-vector kernels' shapes: how a product's output columns, rows of x and K are spread
// over workgroups, teams and lanes (codegen/matmul_gemv.cc and matmul_gemv_q8.cc render them).
// Each rule's measurements: bench/RESULTS.md, "The matrix-vector kernels' shape rules", all on
// NVIDIA (an H100); on other device classes they are the portable default, the same rule from the
// device's capabilities.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "codegen/target_caps.h"
#include "codegen/tuning/gemv.h"
#include "graph/dtype.h"

namespace doppler::codegen::tuning {

// A product y[m, n] = x[m, k] · wᵀ, w of n · gates rows split into parts of `part_values` values,
// `parts_per_row` a row (codegen/weight_parts.h: the float decoder's, or the q8 decoder's for the
// q8 kernel).
struct GemvProblem {
  int64_t m = 1;
  int64_t k = 0;
  int64_t n = 0;
  int64_t gates = 1;
  graph::DType w_dtype = graph::DType::kF32;
  int64_t part_values = 0;
  int64_t parts_per_row = 0;
  bool norm = false;  // a norm prologue: the reductions sum each row's squares too (float kernel)
};

struct GemvShape {
  int64_t tm = 1;           // rows of x a workgroup takes (GemvConfig::rows)
  uint32_t row_blocks = 1;  // ceil(m / tm)
  int64_t rn = 1;           // output columns a workgroup computes
  uint32_t wg = 32;         // invocations a workgroup
  uint32_t groups = 1;      // workgroups a block of rows: ceil(n / rn)
  bool load_ahead = true;   // each invocation loads its next parts before computing with these
};

// The float kernel's shape, for `config` (ChooseGemv).
GemvShape ChooseGemvShape(const TargetCaps& caps, const GemvProblem& p, const GemvConfig& config);

// The float kernel's output columns a workgroup (RN) for TM rows of x: a weight row per 4,096 rows
// of the matrix, 2 to 4 dot products.
int64_t GemvColumnsPerWorkgroup(const GemvProblem& p, int64_t tm);
// Invocations in flight that saturate a large GPU's memory.
inline constexpr int64_t kGemvTargetInvocations = int64_t{1} << 18;
// Whether a workgroup half as wide takes a list of `items` with fewer idle in its last round, where
// this one's would leave more than an eighth of them idle.
bool HalfWorkgroupIdlesLess(int64_t items, int64_t width);
// The float kernel's workgroup size for `workgroups` of them over rows of `row_width` items (a
// row's parts; with `whole_row`, float weights at one row of x, its 16-byte loads of weights): wide
// enough to keep kGemvTargetInvocations invocations in flight (with `whole_row`, as wide as a row's
// items allow, up to 256), never wider than a row has items; narrower where the last round over a
// row would leave many idle (HalfWorkgroupIdlesLess) and the target stays in flight.
uint32_t GemvWorkgroupSize(const TargetCaps& caps, int64_t workgroups, int64_t row_width, bool whole_row);

// The float kernel's workgroup size where the rule's columns a workgroup would make fewer
// workgroups than a large GPU has multiprocessors (each then takes one column): the narrowest power
// of two (from 32) with an invocation for each of a row's parts, up to 1,024 and the device's limit.
uint32_t FewColumnsWorkgroupSize(const TargetCaps& caps, int64_t parts_per_row);

// What the q8 kernel's shape depends on beside the product.
struct GemvQ8Extras {
  int64_t decoder_shared_bytes = 0;  // WeightParts::q8_shared_bytes: the decoder's tables
  bool argmax_tail = false;          // the kernel finishes an argmax (two more floats an invocation)
  bool shuffle_blocks = false;       // a block's 8 staging invocations exchange through shuffles
  bool restate = false;              // x is a norm's normalised sum the kernel computes (one segment)
};

struct GemvQ8Shape {
  int64_t tm = 1;           // rows of x a workgroup takes (GemvConfig::rows)
  uint32_t row_blocks = 1;  // ceil(m / tm)
  int64_t rn = 1;           // output columns a team computes at a time
  uint32_t wg = 256;        // invocations a workgroup
  uint32_t team = 256;      // invocations a team: whole subgroups, or the workgroup
  bool subgroup_teams = false;
  uint32_t subs = 1;            // subgroups a team (1 where the team is the workgroup)
  int64_t row_groups = 1;       // groups of rn output columns: ceil(n / rn)
  int64_t rg_per_team = 1;      // row groups a team takes
  uint32_t workgroups = 1;      // a block of rows'
  int64_t seg = 0;              // values of a row x is staged by (k, or whole superblocks of it)
  int64_t segments = 1;         // ceil(k / seg)
  int64_t steps = 1;            // staging steps of four values an invocation over a segment
  int64_t batch = 1;            // of them, those whose loads are issued together
  int64_t iters = 1;            // iterations of a team over a segment's parts of a row
  int64_t depth = 1;            // iterations whose parts a lane keeps in flight
  bool flat = false;            // a team takes its rows' parts as one list
  int64_t flat_iters = 1;       // flat's iterations
  int64_t flat_depth = 1;       // and those in flight
  bool hold_restated = false;   // an invocation keeps its share of a restated norm's rows in registers
};

// The q8 kernel's shape, for `config` (ChooseGemvQ8). Fails where the device's shared memory cannot
// stage 256 values of the rows, or a restated norm's rows in one segment.
absl::StatusOr<GemvQ8Shape> ChooseGemvQ8Shape(const TargetCaps& caps, const GemvProblem& p, const GemvQ8Extras& extras,
                                              const GemvConfig& config);

}  // namespace doppler::codegen::tuning
