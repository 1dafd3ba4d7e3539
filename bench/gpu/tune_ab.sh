#!/usr/bin/env bash
# A/B runs of tuning choices in one binary: `doppler bench --synthetic` of each variant through
# DOPPLER_TUNE, the variants alternating round after round so that drift of the device's clocks
# falls on all alike. One line a run (decode and prefill tok/s, the share of the bandwidth floor),
# and with PROFILE=1 the µs of layer 1's kernels whose line matches KERNELS (an extended regular
# expression over the profile's node, op and kernel columns). Every run's whole output is kept in
# LOG_DIR.
#
#   bench/gpu/tune_ab.sh VARIANTS_FILE [ROUNDS]   from the repository root, with build/doppler (or
#                                                 DOPPLER_BINARY)
#
# VARIANTS_FILE: one run a line, "MODEL QUANT TUNE": a synthetic model's name, its --quant (or - for
# its own types), the DOPPLER_TUNE value (or - for the choices); # starts a comment.
# Environment: P, N, R (doppler bench's -p, -n, -r: 64, 128, 2), PROFILE=1, KERNELS (default
# "expert|matmul"), LOG_DIR (default $OUT where set, else a new temporary folder), BATCH (a list
# such as 8,16,32: batched decode instead, `doppler bench --batch BATCH`, one line a run with each
# B's decode tok/s and step ms; with PROFILE=1 the profile's kernel lines of the last B).
set -euo pipefail
[ $# -ge 1 ] && [ -f "$1" ] || { echo "usage: $0 VARIANTS_FILE [ROUNDS]" >&2; exit 2; }
variants_file=$1
rounds=${2:-2}
root=$(cd "$(dirname "$0")/../.." && pwd)
doppler=${DOPPLER_BINARY:-$root/build/doppler}
[ -x "$doppler" ] || { echo "error: $doppler not found; build first" >&2; exit 1; }
p=${P:-64} n=${N:-128} r=${R:-2}
log_dir=${LOG_DIR:-${OUT:-$(mktemp -d)}}
mkdir -p "$log_dir"
profile=()
[ "${PROFILE:-0}" = 1 ] && profile=(--profile)
batch=()
[ -n "${BATCH:-}" ] && batch=(--batch "$BATCH")
kernels=${KERNELS:-expert|matmul}

echo "doppler bench --synthetic MODEL -p $p -n $n -r $r ${batch[*]} ${profile[*]}, $rounds rounds; logs in $log_dir"
for round in $(seq 1 "$rounds"); do
  while read -r model quant tune; do
    [ -n "$model" ] && [ "${model#\#}" = "$model" ] || continue
    quant_args=()
    [ "$quant" != "-" ] && quant_args=(--quant "$quant")
    [ "$tune" = "-" ] && tune=""
    log="$log_dir/${model}.${quant}.${tune//[^a-z0-9_]/_}.round$round.txt"
    if ! DOPPLER_TUNE=$tune "$doppler" bench --synthetic "$model" "${quant_args[@]}" -p "$p" -n "$n" -r "$r" \
        "${batch[@]}" "${profile[@]}" > "$log" 2>&1; then
      echo "round $round $model $quant $tune: failed (see $log)"; tail -5 "$log"; continue
    fi
    if [ ${#batch[@]} -gt 0 ]; then
      # The table's rows "| B | T_PP | S_PP | T_TG | S_TG | per sequence | step ms |".
      rows=$(awk -F'|' '$2 ~ /^ *[0-9]+ *$/ { printf "B=%d %s tok/s (%s ms)  ", $2, $6 + 0, $8 + 0 }' "$log")
      printf 'round %s  %-14s %-7s %-44s %s\n' "$round" "$model" "$quant" "${tune:--}" "$rows"
      [ ${#profile[@]} -gt 0 ] && awk '/^B=[0-9]+: profiled step/ { block = "" } /^B=[0-9]+: profiled step|^ +[0-9.]+ us +[0-9]+ x / { block = block $0 "\n" }
        END { printf "%s", block }' "$log"
      continue
    fi
    tg=$(sed -n "s/^tg$n: \([^(]*\) tok\/s.*/\1/p" "$log")
    pp=$(sed -n "s/^pp$p: \(.*\) tok\/s.*/\1/p" "$log")
    floor=$(sed -n 's/^bandwidth floor: .*tg = \(.*\) of the floor/\1/p' "$log")
    printf 'round %s  %-14s %-7s %-44s tg%s %-16s tok/s = %-7s of the floor   pp%s %s tok/s\n' \
      "$round" "$model" "$quant" "${tune:--}" "$n" "$tg" "$floor" "$p" "$pp"
    if [ ${#profile[@]} -gt 0 ]; then
      # The decode step's profile (rows "#  level  node  op  kernel  µs ..."), before the prefill's.
      awk -v k="$kernels" '/^profile of a prefill/ { exit }
        $3 ~ /^layers\.1\./ && $0 ~ k { printf "    %-44s %-64s %8s us\n", $3, $5, $6 }' "$log"
    fi
  done < "$variants_file"
done
