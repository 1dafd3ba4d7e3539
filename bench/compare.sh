#!/usr/bin/env bash
# Benchmarks one GGUF file with doppler and, when given a llama.cpp build, with llama-bench on the
# same GPU, and prints one table: pp and tg tok/s of each and their ratio. See bench/compare.md.
#
#   bench/compare.sh MODEL.gguf [LLAMA_CPP_BUILD_DIR_OR_LLAMA_BENCH] [-p 512] [-n 128] [-r 5]
set -euo pipefail

usage() { echo "usage: $0 MODEL.gguf [llama-bench or llama.cpp build dir] [-p N] [-n N] [-r N]" >&2; exit 2; }
[ $# -ge 1 ] || usage
model=$1; shift
llama=""
if [ $# -ge 1 ] && [ "${1#-}" = "$1" ]; then llama=$1; shift; fi
p=512 n=128 r=5
while [ $# -gt 0 ]; do
  case $1 in
    -p) p=$2; shift 2 ;;
    -n) n=$2; shift 2 ;;
    -r) r=$2; shift 2 ;;
    *) usage ;;
  esac
done
[ -f "$model" ] || { echo "error: no such model file: $model" >&2; exit 1; }
command -v python3 >/dev/null || { echo "error: python3 is needed to read the JSON results" >&2; exit 1; }
root=$(cd "$(dirname "$0")/.." && pwd)
doppler=${DOPPLER_BINARY:-$root/build/doppler}
[ -x "$doppler" ] || { echo "error: $doppler not found; build first (scripts/build.sh)" >&2; exit 1; }
if [ -n "$llama" ]; then
  for c in "$llama" "$llama/bin/llama-bench" "$llama/llama-bench"; do
    if [ -f "$c" ] && [ -x "$c" ]; then llama_bench=$c; break; fi
  done
  [ -n "${llama_bench:-}" ] || { echo "error: no llama-bench at $llama" >&2; exit 1; }
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "doppler bench -m $model -p $p -n $n -r $r" >&2
"$doppler" bench --model "$model" -p "$p" -n "$n" -r "$r" --json > "$tmp/doppler.json"
if [ -n "${llama_bench:-}" ]; then
  # All layers on the GPU, flash attention on: llama.cpp's fastest configuration.
  echo "$llama_bench -m $model -p $p -n $n -r $r -ngl 99 -fa 1 -o json" >&2
  "$llama_bench" -m "$model" -p "$p" -n "$n" -r "$r" -ngl 99 -fa 1 -o json > "$tmp/llama.json"
fi

python3 - "$tmp/doppler.json" "$tmp/llama.json" "$p" "$n" <<'PY'
import json, os, sys
doppler = json.load(open(sys.argv[1]))
p, n = int(sys.argv[3]), int(sys.argv[4])
llama = {}
if os.path.exists(sys.argv[2]):
    for row in json.load(open(sys.argv[2])):
        test = f"pp{row['n_prompt']}" if row.get("n_gen", 0) == 0 else f"tg{row['n_gen']}"
        llama[test] = (row["avg_ts"], row["stddev_ts"])
ours = {f"pp{p}": doppler["pp_tok_s"], f"tg{n}": doppler["tg_tok_s"]}
print(f"model: {doppler['model']}  device: {doppler['device']}")
print(f"| test | doppler tok/s | llama.cpp tok/s | doppler / llama.cpp |")
print(f"| --- | --- | --- | --- |")
for test, d in ours.items():
    if test in llama:
        m, sd = llama[test]
        print(f"| {test} | {d['mean']:.1f} ± {d['sd']:.1f} | {m:.1f} ± {sd:.1f} | {d['mean'] / m:.2f}x |")
    else:
        print(f"| {test} | {d['mean']:.1f} ± {d['sd']:.1f} | - | - |")
print(f"\ntg is {doppler['tg_floor_pct']:.1f}% of the bandwidth floor ({doppler['floor_tok_s']:.0f} tok/s: "
      f"{doppler['weight_bytes_per_token'] / 1e9:.3f} GB per token at {doppler['copy_bandwidth_gb_s']:.0f} GB/s)")
PY
