// The attention family's choices (codegen/emit_attention.cc renders them): its variant for a
// plan's bucket, and each variant's shape. The measurements behind each rule: bench/RESULTS.md,
// "The attention's shape rules".
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

#include "codegen/target_caps.h"
#include "codegen/tuning/tuning.h"

namespace doppler::codegen::tuning {

// Tokens of a bucket from which one sequence's attention over an f16 cache takes the
// cooperative-matrix variant on `caps`: kCoopMinRows, as the matmuls take their tiles (their f16
// operands keep short prompts off both), or kNever where the device has no cooperative matrices.
DeviceChoice ChooseAttentionCoopFrom(const TargetCaps& caps);

// The fewest query heads a kv head for which the keys variant takes a batched decode step's
// attention (groups of 2 gained nothing: Qwen3-0.6B at 64 rows 13,454 → 13,252 tok/s,
// bench/RESULTS.md, "thirteenth session").
inline constexpr int64_t kKeysMinGroup = 4;

// Workgroups (kv heads × rows) of a step with a row per sequence from which the keys variant takes
// its attention, where each kv head serves kKeysMinGroup to kKeysMaxGroup query heads, or kNever
// where the device has no subgroup arithmetic and shuffles. `quads`: a lane's dimensions of the
// head are consecutive quads (AttentionConfig::consec), whose keys and values the variant holds as
// stored; others take it from more workgroups.
DeviceChoice ChooseAttentionKeysFrom(const TargetCaps& caps, bool quads);

enum class AttentionVariant {
  kCoop,       // prefill over an f16 cache on the cooperative-matrix units (codegen/attention_coop.h)
  kBlock,      // prefill: a block of queries a workgroup, keys and values staged once for it
  kSubgroups,  // decode where the device has subgroup arithmetic: a workgroup a (head, query)
  kKeys,       // batched decode: a workgroup a (kv head, row), lanes over keys (codegen/attention_keys.h)
  kToken,      // decode elsewhere: a workgroup a (head, query), one key an invocation
};

struct AttentionProblem {
  int64_t tokens = 1;  // the plan's bucket
  int64_t heads = 1;   // query heads
  int64_t kv_heads = 1;
  int64_t head_dim = 0;
  bool f16_cache = false;
  bool one_sequence = true;  // not a graph with a row per sequence (block and coop take one only)
  int64_t max_keys = 0;      // keys a query sees at most (its window, or the cache's rows), 0: unbounded
};

struct AttentionConfig {
  AttentionVariant variant = AttentionVariant::kToken;
  uint32_t wg = 64;  // invocations a workgroup
  // block: invocations a query (TPQ), queries a workgroup (QB), keys a chunk staged (KC)
  int64_t tpq = 4, qb = 32, kc = 1;
  // subgroups: subgroups a workgroup (NSG), the smallest subgroup a shader may get (MIN_SG), keys a
  // subgroup loads a trip (KPI), and whether a lane owns consecutive dimensions, read as vectors
  // of four (CONSEC)
  int64_t nsg = 1, min_sg = 32, kpi = 1;
  bool consec = false;
  // subgroups and keys: workgroups a (head, row), or (kv head, row), at most (SPLITS), each taking
  // a run of consecutive keys, and the fewest keys a run takes (SPLIT_KEYS): a row of n keys takes
  // min(SPLITS, ceil(n / SPLIT_KEYS)) runs, and where it takes several the last to finish merges
  // their softmaxes
  int64_t splits = 1, split_keys = 1;
  // keys: lanes a key (KL), each scoring a KL-th of its dimensions; its subgroups are nsg, min_sg
  // and its output's dimensions a lane consec, as the subgroups variant's
  int64_t key_lanes = 1;
  // keys: each lane loads its share of its next pass's key during the current pass, held as stored
  // (KEY_AHEAD), so that a pass's scores wait on no load of their own
  bool key_ahead = false;
  int64_t coop_subgroups = 0;  // coop: subgroups a workgroup
  // coop: one pass over the keys (codegen/attention_coop_online.h) in chunks of coop_keys, or two
  // (codegen/attention_coop.h) in chunks of 16
  bool coop_online = false;
  int64_t coop_keys = 16;
};

// The variant and its shape: coop from ChooseAttentionCoopFrom's tokens where the head fits it;
// else block from 8 tokens, for heads of at most 128 dimensions whose staging fits the device;
// else, in a step with a row per sequence of ChooseAttentionKeysFrom's workgroups of the keys
// variant (kv heads × rows) and groups of 4 to kKeysMaxGroup query heads a kv head, keys where the
// head splits into quads for each of a key's lanes and its shared memory fits; else subgroups
// where the device has subgroup arithmetic, else token. In a step with a row per sequence of many
// workgroups (rows × heads) the subgroups variant takes fewer subgroups a workgroup. In a step of
// few workgroups it takes kSplitSubgroups subgroups and splits each row's keys over up to
// kMaxSplits workgroups (as many as make kSplitWorkgroups, and as max_keys lets take at least
// kSplitTrips trips of keys each), the keys variant over up to kKeysMaxSplits. DOPPLER_TUNE:
// attention.splits (1 to 64) and attention.split_keys (at least 1) set those (for either);
// attention.nsg sets the subgroups a workgroup of either, attention.keys (0 or 1) turns keys off
// or takes it at every bucket where it can, attention.key_lanes sets its lanes a key,
// attention.key_ahead (0 or 1) its keys loaded a pass ahead or not. The coop variant takes one
// pass over the keys where the device's f32 fragments keep the mma layout and the head is at most
// kCoopOnlineMaxHeadDim wide, in chunks of kCoopOnlineKeys keys (fewer where the staging would not
// fit); attention.coop_online (0 or 1) and attention.coop_keys (16, 32 or 64) set them.
absl::StatusOr<AttentionConfig> ChooseAttention(const TargetCaps& caps, const AttentionProblem& p);

}  // namespace doppler::codegen::tuning
