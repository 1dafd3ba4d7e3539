#!/usr/bin/env bash
# The A/B of the q8 matrix-vector kernel's decodings of IQ4_XS and Q4_0 weights: bench/gpu/tune_ab.sh
# over bench/gpu/iq4.variants.
#
#   bench/gpu/iq4_ab.sh [ROUNDS]     from the repository root, with build/doppler (or DOPPLER_BINARY)
set -euo pipefail
here=$(dirname "$0")
exec "$here/tune_ab.sh" "$here/iq4.variants" "$@"
