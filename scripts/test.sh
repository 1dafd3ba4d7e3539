#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (GoogleTest under ctest) on the Vulkan
# device the loader finds first; with no GPU that is lavapipe, the CPU driver. Every test runs with
# the Khronos validation layer on and fails on any validation message.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" --timeout 600
