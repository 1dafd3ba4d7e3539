#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang into ./build-fuzz and runs each for SECONDS
# (default 60), seeded with the fixture files. Fails on any crash, sanitizer report, leak, or
# allocation over the malloc limit; the input that did it is saved in build-fuzz/artifacts/.
# Usage: scripts/fuzz.sh [SECONDS]   (needs clang and libclang-rt-dev)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
fixtures="${DOPPLER_FIXTURES:-$(cd .. && pwd)/shared/fixtures}"
jobs=$(nproc 2>/dev/null || echo 2)

CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Release -DDOPPLER_BUILD_FUZZERS=ON \
  -DDOPPLER_BUILD_TESTS=OFF >/dev/null
fuzzers="gguf_fuzzer safetensors_fuzzer config_fuzzer tokenizer_fuzzer jinja_fuzzer"
cmake --build build-fuzz --target $fuzzers -j "$jobs"

# Seeds: the fixture files (the fixtures' tokenizers are megabytes, so tokenizer.json starts from
# the small ones in fuzz/seeds/). Inputs are capped at 64 KiB (headers and some data); the
# harnesses zero-pad the file so that capped headers still open. The Jinja fuzzer starts from the
# real chat templates (rendered with its built-in conversation).
mkdir -p build-fuzz/corpus/gguf build-fuzz/corpus/safetensors build-fuzz/corpus/config build-fuzz/corpus/tokenizer build-fuzz/corpus/jinja \
  build-fuzz/artifacts
cp -f "$fixtures"/chat_templates/*.jinja build-fuzz/corpus/jinja/
cp -f "$fixtures"/gguf/*.gguf build-fuzz/corpus/gguf/
for f in "$fixtures"/hf/*/model.safetensors; do
  cp -f "$f" "build-fuzz/corpus/safetensors/$(basename "$(dirname "$f")").safetensors"
done
for f in "$fixtures"/hf/*/config.json; do
  cp -f "$f" "build-fuzz/corpus/config/$(basename "$(dirname "$f")").json"
done
cp -f fuzz/seeds/tokenizer/*.json build-fuzz/corpus/tokenizer/
chmod -R u+w build-fuzz/corpus

for fuzzer in $fuzzers; do
  corpus="build-fuzz/corpus/${fuzzer%_fuzzer}"
  echo "== $fuzzer: ${seconds}s from $corpus"
  "build-fuzz/fuzz/$fuzzer" "$corpus" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
    -rss_limit_mb=2048 -malloc_limit_mb=512 -print_final_stats=1 \
    -artifact_prefix="build-fuzz/artifacts/${fuzzer}-"
done
echo "fuzz: no crashes"
