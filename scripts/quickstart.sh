#!/usr/bin/env bash
# Installs what is missing, builds, and generates from a model.
# usage: scripts/quickstart.sh MODEL_DIR [PROMPT_IDS] [N]
#   MODEL_DIR   an HF model directory (config.json + *.safetensors), Llama family
#   PROMPT_IDS  comma-separated prompt token ids (default: 1, the BOS token of Llama-2-style vocabularies)
#   N           tokens to generate (default 64)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: scripts/quickstart.sh MODEL_DIR [PROMPT_IDS] [N]}
bash scripts/install-deps.sh
bash scripts/build.sh
./build/doppler run --model "$model" --prompt-ids "${2:-1}" -n "${3:-64}"
