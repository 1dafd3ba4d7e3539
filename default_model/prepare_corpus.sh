#!/usr/bin/env bash
# Writes the training corpus of the default model: the King James Bible (public domain) from
# Debian's bible-kjv-text package, read out with the package's own reader (bible-kjv), as plain
# text: a "Book N" line per chapter, then one "  V text" line per verse.
# usage: default_model/prepare_corpus.sh [OUT_DIR]   (default: .train/ in the checkout, git-ignored)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/.train}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
apt-get download bible-kjv-text bible-kjv
for deb in *.deb; do
  dpkg -x "$deb" x
  dpkg-deb -f "$deb" Package Version | paste -sd' '
done | tee "$out/kjv.version"
# -l: no line wrapping; the whole text, Genesis 1:1 to Revelation 22:21.
x/usr/bin/bible -p x/usr/lib -l100000 'Gen1:1-Rev22:21' >"$out/kjv.txt"
wc -c "$out/kjv.txt"
sha256sum "$out/kjv.txt"
