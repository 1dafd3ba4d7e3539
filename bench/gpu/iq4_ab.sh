#!/usr/bin/env bash
# The A/B of the q8 matrix-vector kernel's decodings of IQ4_XS and Q4_0 weights (codegen/tuning/
# gemv.h: gemv_q8.iq4_pairs, gemv_q8.iq4_xs_part, gemv_q8.q4_0_signed, gemv_q8.q4_0_part) in one
# binary: decode (and
# a short prefill, which does not use that kernel) of a synthetic model per variant through
# DOPPLER_TUNE, the variants alternating round after round so that drift of the device's clocks
# falls on all alike. One line a run; every run's
# whole output (with --profile where PROFILE=1: µs a kernel) is kept in LOG_DIR.
#
#   bench/gpu/iq4_ab.sh [ROUNDS]     from the repository root, with build/doppler (or DOPPLER_BINARY)
#
# Environment: MODEL (default llama-3.1-8b), P, N, R (doppler bench's -p, -n, -r: 64, 128, 2),
# PROFILE=1, LOG_DIR (default $OUT where set, else a new temporary folder), VARIANTS (the runs,
# "quant tune" a line; default below).
set -euo pipefail
rounds=${1:-2}
root=$(cd "$(dirname "$0")/../.." && pwd)
doppler=${DOPPLER_BINARY:-$root/build/doppler}
[ -x "$doppler" ] || { echo "error: $doppler not found; build first" >&2; exit 1; }
model=${MODEL:-llama-3.1-8b}
p=${P:-64} n=${N:-128} r=${R:-2}
log_dir=${LOG_DIR:-${OUT:-$(mktemp -d)}}
mkdir -p "$log_dir"
# IQ4_XS: the nibble grids in parts of 32 values (the old kernel); the choice (the table of nibble
# pairs in 16 replicas, parts of 64 values); the same in parts of 32; the table in 32 replicas (no
# bank conflicts; 32 KiB, which stages the down projections' x in two segments); the table in one
# (3-way conflicts, an address with no replica to or in). Q4_0: unsigned quants with the sum of x
# (the old kernel), signed quants (the choice), signed in parts of two blocks.
variants=${VARIANTS:-"iq4_xs gemv_q8.iq4_pairs=0,gemv_q8.iq4_xs_part=32
iq4_xs gemv_q8.iq4_pairs=16,gemv_q8.iq4_xs_part=64
iq4_xs gemv_q8.iq4_pairs=16,gemv_q8.iq4_xs_part=32
iq4_xs gemv_q8.iq4_pairs=32,gemv_q8.iq4_xs_part=64
iq4_xs gemv_q8.iq4_pairs=1,gemv_q8.iq4_xs_part=64
q4_0 gemv_q8.q4_0_signed=0,gemv_q8.q4_0_part=32
q4_0 gemv_q8.q4_0_signed=1,gemv_q8.q4_0_part=32
q4_0 gemv_q8.q4_0_signed=1,gemv_q8.q4_0_part=64"}
profile=()
[ "${PROFILE:-0}" = 1 ] && profile=(--profile)

echo "doppler bench --synthetic $model -p $p -n $n -r $r ${profile[*]}, $rounds rounds; logs in $log_dir"
for round in $(seq 1 "$rounds"); do
  while read -r quant tune; do
    [ -n "$quant" ] || continue
    log="$log_dir/${quant}.${tune//[^a-z0-9_]/_}.round$round.txt"
    if ! DOPPLER_TUNE=$tune "$doppler" bench --synthetic "$model" --quant "$quant" -p "$p" -n "$n" -r "$r" \
        "${profile[@]}" > "$log" 2>&1; then
      echo "round $round $quant $tune: failed (see $log)"; tail -5 "$log"; continue
    fi
    tg=$(sed -n "s/^tg$n: \([^(]*\) tok\/s.*/\1/p" "$log")
    pp=$(sed -n "s/^pp$p: \(.*\) tok\/s.*/\1/p" "$log")
    floor=$(sed -n 's/^bandwidth floor: .*tg = \(.*\) of the floor/\1/p' "$log")
    printf 'round %s  %-7s %-44s tg%s %-16s tok/s = %-7s of the floor   pp%s %s tok/s\n' \
      "$round" "$quant" "$tune" "$n" "$tg" "$floor" "$p" "$pp"
  done <<< "$variants"
done
