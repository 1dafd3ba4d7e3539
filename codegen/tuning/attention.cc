#include "codegen/tuning/attention.h"

#include <algorithm>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/attention_coop.h"
#include "codegen/attention_coop_online.h"
#include "codegen/attention_keys.h"
#include "codegen/tuning/coop.h"

namespace doppler::codegen::tuning {

DeviceChoice ChooseAttentionCoopFrom(const TargetCaps& caps) {
  if (!caps.coop_matrix_nv) return {kNever, "the device has no cooperative matrices"};
  // Llama-3.2-1B's prefill attention 7.4 → 1.4 ms on the H100.
  return {kCoopMinRows, ClassReason(caps, DeviceClass::kNvidia,
                                    "bench/RESULTS.md, \"issue 7, third session: loads in flight, fewer dispatches, "
                                    "prefill on the tensor units\"")};
}

namespace {

// The token variant's workgroup.
constexpr uint32_t kWorkgroup = 64;
// The block variant: its workgroup, the smallest bucket that takes it, and the widest head (wider
// ones measured slower than the token variant).
constexpr uint32_t kBlockWorkgroup = 128;
constexpr int64_t kBlockMinTokens = 8, kBlockMaxHeadDim = 128;
// A step with a row per sequence (a workgroup each row's query head) of at least kManyWorkgroups
// workgroups (about 4 a multiprocessor of an H200's 132) fills the GPU with kManySubgroups
// subgroups a workgroup; more only add to each workgroup's sums across them. Llama-3.1-8B at 128 +
// 128 tokens: 8 rows (256 workgroups) 1,252 tok/s with 32 subgroups against 1,202 with 8; 16 rows
// 1,919 with 8 against 1,892 with 16 and 1,853 with 32; 32 rows 2,724 with 8 against 2,584 with
// 32; 64 rows 3,006 with 8 against 2,917 with 4, 2,740 with 32 and 2,578 with 2 (bench/RESULTS.md,
// "eleventh session").
constexpr int64_t kManyWorkgroups = 512, kManySubgroups = 8;
// The keys variant: the query heads a kv head and the workgroups (kv heads × rows) from which it is
// taken, its subgroups a workgroup and lanes a key (at least, so that a pass holds at most 8 keys'
// values). At 128 + 128 tokens on the H200, with groups of 4: Llama-3.1-8B's batched attention
// 2,320 → 1,265 µs a step at 32 rows (bench/RESULTS.md, "thirteenth session"), and with its values
// held as stored and its keys a pass ahead ("fifteenth session"), against the subgroups variant:
// Llama-3.1-8B at 8 rows (64 workgroups) 1,268 → 1,315 tok/s, 16 rows (128) 1,995 → 2,133, but 4
// rows (32) 689 → 682 and 2 rows 476 → 437; Qwen2.5-1.5B (two kv heads, groups of 6) at 32 rows
// (64) 6,731 → 7,225, 64 rows 9,993 → 10,320, 16 rows (32) 5,008 → 5,260, 8 rows 3,482 → 3,334;
// Gemma-3-1B (one kv head) at 64 rows 10,255 → 10,375, 32 rows 9,274 → 8,720. Heads of 64 on
// NVIDIA (two dimensions a lane, not a quad: values and keys held as floats, loaded in the pass)
// from 128: Llama-3.2-1B at 8 rows (64) 4,415 → 4,168, 16 rows (128) 6,478 → 6,939. Groups of 8
// are measured nowhere (kKeysMinGroup: groups of 2 gained nothing). 4 subgroups, 16, and 2 or 8
// lanes a key were slower on Llama-3.1-8B.
constexpr int64_t kKeysMinWorkgroups = 64, kKeysMinWorkgroupsAsFloats = 128;
constexpr int64_t kKeysSubgroups = 8, kKeyLanes = 4, kKeysAPass = 8;
// The one-pass coop variant's subgroups a workgroup and keys a chunk (each invocation's share of a
// chunk then small enough to be read while the previous chunk's products run, for heads of 128):
// Llama-3.1-8B's attention at 2,048 tokens 350 µs a layer with chunks of 32, 391 with 16 and 512
// with 64, against the two-pass variant's 1,439 (bench/RESULTS.md, "twentieth session").
constexpr int64_t kCoopOnlineSubgroups = 4, kCoopOnlineKeys = 32;
// The subgroups variant's split of a row's keys over workgroups: a one-token step has one
// workgroup a query head (32 on Llama-3.1-8B and Qwen3-30B-A3B), which at 4,096 keys took 78 µs a
// layer on the H200 with 32 subgroups, 240 with 8 (bench/RESULTS.md, "twenty-eighth session"):
// the trips over the keys, each a round of loads, not the bytes. In runs of 8 subgroups over 16
// workgroups a head Llama-3.1-8B's took 30 µs (67, 40 and 35 over 4, 8 and 32). A run takes at
// least kSplitTrips trips (over 16 to 80 keys, runs of one trip took 6.4 µs, of four 5.9); 8
// subgroups were faster than 32 over short contexts too (4.0 against 4.4 µs on Llama-3.1-8B).
constexpr int64_t kSplitWorkgroups = 512, kMaxSplits = 16, kSplitTrips = 4, kSplitSubgroups = 8;
// The keys variant's runs: as many as make kSplitWorkgroups workgroups (kv heads × rows × runs),
// kKeysMaxSplits at most. Llama-3.1-8B's batched decode over contexts of 2,048 to 2,080 keys on
// the H200 (`--batch 8,16 -p 2048 -n 32`): 8 rows 1,041.8 tok/s in one run, 1,260.1 in 4, 1,219.2
// in 8; 16 rows 1,656.8 in one, 1,714.1 in 4, 1,638.8 in 8; over 128 to 160 keys, where a row
// takes one run, 8 rows 1,459.7 → 1,451.6 and 16 rows 2,166.9 → 2,147.0 (the grid's idle
// workgroups; bench/RESULTS.md, "twenty-ninth session").
constexpr int64_t kKeysMaxSplits = 4;
// attention.splits at most (each run's partial softmax takes a row of the kernel's scratch).
constexpr int64_t kMostSplits = 64;

}  // namespace

DeviceChoice ChooseAttentionKeysFrom(const TargetCaps& caps, bool quads) {
  if (!caps.subgroup_arithmetic || !caps.subgroup_shuffle) {
    return {kNever, "the device has no subgroup arithmetic and shuffles"};
  }
  if (!quads) {
    return {kKeysMinWorkgroupsAsFloats,
            ClassReason(caps, DeviceClass::kNvidia,
                        "bench/RESULTS.md, \"fifteenth session\": Llama-3.2-1B's 16 rows 6,478 → 6,939 tok/s")};
  }
  return {kKeysMinWorkgroups,
          ClassReason(caps, DeviceClass::kNvidia,
                      "bench/RESULTS.md, \"fifteenth session\": Llama-3.1-8B's 8 rows 1,268 → 1,315 tok/s")};
}

absl::StatusOr<AttentionConfig> ChooseAttention(const TargetCaps& caps, const AttentionProblem& p) {
  AttentionConfig a;
  const int64_t head_dim = p.head_dim;
  // Invocations per query in the block variant: enough that each owns at most 16 output
  // dimensions (of a head_dim they divide). Keys per chunk: as many as 16 KiB of shared memory
  // holds for K (and again for V), up to 32, fewer where the whole does not fit the device's
  // shared memory (32 KiB on some).
  a.tpq = std::min<int64_t>(std::max<int64_t>(4, head_dim / 16), kBlockWorkgroup);
  a.qb = kBlockWorkgroup / a.tpq;
  auto block_shared = [&](int64_t keys) {  // s_q, s_k (padded), s_v, s_p, s_part
    return 4 * (a.qb * head_dim + keys * (head_dim + 1) + keys * head_dim + a.qb * keys + a.qb * a.tpq);
  };
  a.kc = std::max<int64_t>(1, std::min<int64_t>(32, 4096 / head_dim));
  while (a.kc > 1 && block_shared(a.kc) > caps.max_shared_memory) --a.kc;
  a.coop_subgroups = CoopAttentionSubgroups(caps, head_dim);
  const bool coop = p.one_sequence && p.tokens >= ChooseAttentionCoopFrom(caps).value && p.f16_cache &&
                    a.coop_subgroups > 0;
  if (coop) {
    absl::StatusOr<std::optional<int64_t>> online = OverrideOneOf("attention", "coop_online", {0, 1});
    if (!online.ok()) return online.status();
    absl::StatusOr<std::optional<int64_t>> keys = OverrideOneOf("attention", "coop_keys", {16, 32, 64});
    if (!keys.ok()) return keys.status();
    a.coop_keys = *keys ? **keys : kCoopOnlineKeys;
    while (a.coop_keys > 16 && CoopOnlineSharedBytes(kCoopOnlineSubgroups, a.coop_keys, head_dim) > caps.max_shared_memory) {
      a.coop_keys /= 2;
    }
    const bool can = caps.coop_accumulators_mma && caps.subgroup_arithmetic && caps.subgroup_shuffle &&
                     head_dim <= kCoopOnlineMaxHeadDim &&
                     CoopOnlineSharedBytes(kCoopOnlineSubgroups, a.coop_keys, head_dim) <= caps.max_shared_memory;
    a.coop_online = can && (*online ? **online == 1 : true);
    if (a.coop_online) {
      a.coop_subgroups = kCoopOnlineSubgroups;
    } else {
      a.coop_keys = 16;
    }
  }
  const bool block = p.one_sequence && !coop && p.tokens >= kBlockMinTokens && head_dim % a.tpq == 0 &&
                     head_dim <= kBlockMaxHeadDim && block_shared(a.kc) <= caps.max_shared_memory;
  const bool subgroup_decode = !coop && !block && caps.subgroup_arithmetic;  // subgroups or keys
  // The subgroups variant: up to 32 subgroups, fewer where their partial outputs (and q) would pass
  // half the device's shared memory; keys per subgroup per trip: as many as keep 8 values of K
  // (and 8 of V) per lane in flight, at most 4.
  a.min_sg = std::max<int64_t>(1, caps.min_subgroup_size);
  const int64_t shared_for_partials = static_cast<int64_t>(caps.max_shared_memory) / 2 - 4 * head_dim;
  a.nsg = std::max<int64_t>(1, std::min<int64_t>({32, shared_for_partials / (4 * head_dim + 8),
                                                   caps.max_workgroup_invocations / a.min_sg}));
  if (!p.one_sequence && p.tokens * p.heads >= kManyWorkgroups) a.nsg = std::min(a.nsg, kManySubgroups);
  // The keys variant (which adds a key's lanes' scores by shuffles): its lanes a key, as many of
  // them as split the head into quads each, at least 2.
  const int64_t group = p.heads / std::max<int64_t>(1, p.kv_heads);
  a.key_lanes = std::min(std::max(kKeyLanes, a.min_sg / kKeysAPass), a.min_sg);
  absl::StatusOr<std::optional<int64_t>> key_lanes = OverrideOneOf("attention", "key_lanes", {2, 4, 8, 16});
  if (!key_lanes.ok()) return key_lanes.status();
  if (*key_lanes) a.key_lanes = std::min(**key_lanes, a.min_sg);
  while (a.key_lanes > 2 && head_dim % (4 * a.key_lanes) != 0) a.key_lanes /= 2;
  absl::StatusOr<std::optional<int64_t>> keys_on = OverrideOneOf("attention", "keys", {0, 1});
  if (!keys_on.ok()) return keys_on.status();
  absl::StatusOr<std::optional<int64_t>> nsg = OverrideOneOf("attention", "nsg", {1, 2, 4, 8, 16, 32});
  if (!nsg.ok()) return nsg.status();
  const int64_t most_subgroups = static_cast<int64_t>(caps.max_workgroup_invocations) / a.min_sg;
  int64_t keys_nsg = std::min(*nsg ? **nsg : kKeysSubgroups, most_subgroups);
  auto keys_shared = [&](int64_t subgroups) {
    return KeysAttentionSharedBytes(subgroups * a.min_sg, a.min_sg, a.key_lanes, group, head_dim);
  };
  while (keys_nsg > 1 && keys_shared(keys_nsg) > caps.max_shared_memory) keys_nsg /= 2;
  // A lane's dimensions of a head: consecutive ones, read as vectors of four, where the head
  // splits into quads a lane (the subgroups and keys variants; CONSEC).
  const bool quads = head_dim % (4 * a.min_sg) == 0;
  const int64_t keys_from = ChooseAttentionKeysFrom(caps, quads).value;
  const bool keys = subgroup_decode && keys_from != kNever && !p.one_sequence && group <= kKeysMaxGroup &&
                    a.key_lanes >= 2 && head_dim % (4 * a.key_lanes) == 0 &&
                    keys_shared(keys_nsg) <= caps.max_shared_memory &&
                    (*keys_on ? **keys_on == 1 : group >= kKeysMinGroup && p.kv_heads * p.tokens >= keys_from);
  const bool subgroups = subgroup_decode && !keys;
  absl::StatusOr<std::optional<int64_t>> splits = OverrideAtLeast("attention", "splits", 1);
  if (!splits.ok()) return splits.status();
  if (*splits && **splits > kMostSplits) {
    return absl::InvalidArgumentError(
        absl::StrCat("DOPPLER_TUNE: attention.splits=", **splits, " is more than ", kMostSplits));
  }
  if (subgroups || keys) {
    // A run's workgroups: a query head and row each, or with the keys variant a kv head and row.
    const int64_t run_workgroups = std::max<int64_t>(1, p.tokens * (keys ? p.kv_heads : p.heads));
    a.splits = *splits ? **splits
                       : std::clamp<int64_t>(kSplitWorkgroups / run_workgroups, 1, keys ? kKeysMaxSplits : kMaxSplits);
    if (subgroups && a.splits > 1) a.nsg = std::min(a.nsg, kSplitSubgroups);
  }
  if (*nsg) a.nsg = std::min(**nsg, most_subgroups);
  if (keys) a.nsg = keys_nsg;
  const int64_t dims_per_lane = (head_dim + a.min_sg - 1) / a.min_sg;
  a.kpi = std::max<int64_t>(1, std::min<int64_t>(4, 8 / dims_per_lane));
  absl::StatusOr<std::optional<int64_t>> split_keys = OverrideAtLeast("attention", "split_keys", 1);
  if (!split_keys.ok()) return split_keys.status();
  // A trip of the subgroups variant takes KPI keys a subgroup, a pass of the keys variant a key
  // every key_lanes lanes.
  a.split_keys = *split_keys ? **split_keys : kSplitTrips * a.nsg * (keys ? a.min_sg / a.key_lanes : a.kpi);
  // A window (or a small cache) bounds the runs a row can take: no more workgroups than can work.
  if (!*splits && p.max_keys > 0) a.splits = std::min(a.splits, (p.max_keys + a.split_keys - 1) / a.split_keys);
  a.consec = (subgroups || keys) && quads;
  // The keys variant's next pass's key loaded during the current one, as stored, where its values
  // are held as stored too (CONSEC): Llama-3.1-8B's batched attention 920 → 700 µs a step at 32
  // rows; for heads of 64 (held as floats) Llama-3.2-1B's lost at 64 rows, 760 → 1,250
  // (bench/RESULTS.md, "fifteenth session").
  absl::StatusOr<std::optional<int64_t>> key_ahead = OverrideOneOf("attention", "key_ahead", {0, 1});
  if (!key_ahead.ok()) return key_ahead.status();
  a.key_ahead = keys && (*key_ahead ? **key_ahead == 1 : a.consec);
  a.variant = coop        ? AttentionVariant::kCoop
              : block     ? AttentionVariant::kBlock
              : subgroups ? AttentionVariant::kSubgroups
              : keys      ? AttentionVariant::kKeys
                          : AttentionVariant::kToken;
  a.wg = coop        ? static_cast<uint32_t>(32 * a.coop_subgroups)
         : block     ? static_cast<uint32_t>(a.qb * a.tpq)  // whole queries: 125 for 80-wide heads
         : subgroups || keys ? static_cast<uint32_t>(a.nsg * a.min_sg)
                     : kWorkgroup;
  return a;
}

}  // namespace doppler::codegen::tuning
