#!/usr/bin/env bash
# Writes the King James Bible as plain text (one verse a line, 4.3 MB) to data/kjv.txt, the
# default corpus of `mpitron train`. Needs Debian's bible-kjv package.
set -euo pipefail
out=${1:-data/kjv.txt}
if [[ -s "$out" ]]; then
  echo "$out exists"
  exit 0
fi
if ! command -v bible >/dev/null 2>&1; then
  echo "error: the 'bible' program is missing: apt-get install bible-kjv" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
bible -f "Gen1:1-Rev22:21" </dev/null | sed 's/^[^ ]* //' >"$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out ($(wc -c <"$out") bytes)"
