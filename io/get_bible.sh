#!/usr/bin/env bash
# Writes the King James Bible as plain text (one verse a line, 4.3 MB) to data/kjv.txt, the
# default corpus of `mpitron train`. With --references each line keeps its reference
# ("Mat1:1 The book of ..."): the verse file of the encoder's classification tasks
# (data/kjv_verses.txt). Needs Debian's bible-kjv package.
# Usage: io/get_bible.sh [OUT] [--references]
set -euo pipefail
out=${1:-data/kjv.txt}
refs=${2:-}
if [[ -n $refs && $refs != --references ]]; then
  echo "error: unknown option $refs (usage: $0 [OUT] [--references])" >&2
  exit 2
fi
if [[ -s "$out" ]]; then
  echo "$out exists"
  exit 0
fi
if ! command -v bible >/dev/null 2>&1; then
  echo "error: the 'bible' program is missing: apt-get install bible-kjv" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
if [[ -n $refs ]]; then
  bible -f "Gen1:1-Rev22:21" </dev/null >"$out.tmp"
else
  bible -f "Gen1:1-Rev22:21" </dev/null | sed 's/^[^ ]* //' >"$out.tmp"
fi
mv "$out.tmp" "$out"
echo "wrote $out ($(wc -c <"$out") bytes)"
