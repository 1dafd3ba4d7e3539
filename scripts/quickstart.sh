#!/usr/bin/env bash
# Installs what is missing, builds, and generates from a model.
# usage: scripts/quickstart.sh [MODEL [PROMPT [N]]]
#   MODEL   an HF model directory (config.json + *.safetensors) or a GGUF file; default (or ""): the
#           model that ships with doppler, default_model/default-q8_0.gguf
#   PROMPT  the prompt text, or comma-separated prompt token ids (default: "In the beginning")
#   N       tokens to generate (default 64)
set -euo pipefail
cd "$(dirname "$0")/.."
model=()
if [[ -n ${1:-} ]]; then model=(--model "$1"); fi
prompt=${2:-In the beginning}
if [[ $prompt =~ ^[0-9]+(,[0-9]+)*$ ]]; then prompt=(--prompt-ids "$prompt"); else prompt=(-p "$prompt"); fi
bash scripts/install-deps.sh
bash scripts/build.sh
./build/doppler run "${model[@]}" "${prompt[@]}" -n "${3:-64}"
