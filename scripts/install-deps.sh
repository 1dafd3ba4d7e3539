#!/usr/bin/env bash
# Installs the Debian packages doppler needs to build and test, skipping those already present.
# Safe to re-run. Needs root (or sudo) only when something is missing.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libvulkan-dev vulkan-validationlayers mesa-vulkan-drivers vulkan-tools
  glslang-dev glslang-tools glslc spirv-tools spirv-cross libspirv-cross-c-shared-dev
  nlohmann-json3-dev libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev
  libpcre2-dev
  clang libclang-rt-14-dev
  python3
  libcpp-httplib-dev
  chromium curl
)
# Node.js and npm for the serve tests' clients: Debian's packages, unless a Node.js with npm is
# already installed (a distribution of Node.js that bundles npm conflicts with Debian's npm).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The doppler serve tests' clients (tests/serve/package-lock.json: the openai SDK, puppeteer-core).
serve_tests="$(dirname "$0")/../tests/serve"
if [ ! -d "$serve_tests/node_modules" ] || [ "$serve_tests/package-lock.json" -nt "$serve_tests/node_modules" ]; then
  (cd "$serve_tests" && npm ci --no-audit --no-fund)
fi
