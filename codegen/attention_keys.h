// The batched-decode attention variant whose lanes take keys (codegen/emit_attention.cc renders it).
//
// A workgroup takes one row (a sequence's query) and one kv head, so the group's query heads share
// each key and value it reads. A subgroup's lanes take different keys, KL lanes a key (each a
// KL-th of the head's dimensions, read as quads), so that a key's scores for every head of the
// group are plain sums in registers, not a reduction across the subgroup per key and head as in
// the subgroups variant; then its lanes take the output's dimensions and add each key's value,
// weighted, for every head. The subgroups keep running softmaxes of their own keys, merged through
// shared memory at the end.
#pragma once

#include <cstdint>
#include <string>

namespace doppler::codegen {

// The widest query group the variant takes (a lane holds a score and a row of the output per head).
inline constexpr int64_t kKeysMaxGroup = 8;

// Shared bytes of the variant with `subgroups` subgroups of at least `min_subgroup` lanes (a
// workgroup of `wg` invocations), KL lanes a key and a group of `group` heads of `head_dim`
// (an appending kernel's new key and value included).
int64_t KeysAttentionSharedBytes(int64_t wg, int64_t min_subgroup, int64_t key_lanes, int64_t group, int64_t head_dim);

// main() and its shared arrays. Needs the attention prelude (q_value, q_square, q_scale,
// first_key, row_position, cache_row, load4_kq, load_vc and with CONSEC FloatQuadRaw's RAW4_vq,
// raw4_vq and unraw4_vq, with KEY_AHEAD its RAW4_kq, raw4_kq and unraw4_kq, store_o, the APPEND
// helpers, the constants HD, GROUP, KVW, QW, WG, CAP, MIN_SG, DPL, CONSEC and lane_dim, and the
// runs' row_runs, run_keys, SPLIT, put_run and merge_runs) and the placeholders {{KL}},
// {{KEY_AHEAD}}, {{M0}} and {{MERGED_L0}} filled as the other variants' are. Where a row's keys
// are split into runs (grid z), each run merges its subgroups and the last to finish its runs.
const char* KeysAttentionMain();

}  // namespace doppler::codegen
