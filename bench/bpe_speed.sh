#!/usr/bin/env bash
# Encoding speed of the C++ BPE tokenizer (mpitron tokenize) against the JS reference (npm
# gpt-3-encoder via validate/bpe_encode.js) on the whole KJV: seconds, MB/s and the ratio, each
# the best of N runs, encoding time only (the JS helper times encode(); ours is the summary line).
# Usage: bench/bpe_speed.sh [MPITRON] [TEXT] [N]; needs node and data/gpt2-tokenizer.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
mpitron=${1:-$repo/build/mpitron}
text=${2:-$repo/data/kjv.txt}
runs=${3:-3}
tok=$repo/data/gpt2-tokenizer
[[ -x $mpitron ]] || { echo "error: no mpitron binary at $mpitron" >&2; exit 1; }
[[ -s $text ]] || { echo "error: no $text (io/get_bible.sh writes the KJV)" >&2; exit 1; }
[[ -s $tok/Encoder.js ]] || { echo "error: no $tok (io/get_gpt2_tokenizer.sh)" >&2; exit 1; }
command -v node >/dev/null 2>&1 || { echo "error: node is missing" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
best() { sort -g | head -n 1; }
cpp=$(for _ in $(seq "$runs"); do
  "$mpitron" tokenize --tokenizer "$tok" --in "$text" --out "$tmp/t.h5" |
    sed -n 's/.* in \([0-9.]*\) s .*/\1/p'
done | best)
js=$(for _ in $(seq "$runs"); do
  node "$repo/validate/bpe_encode.js" "$tok" "$text" "$tmp/js.txt" 2>&1 >/dev/null |
    sed -n 's/.* in \([0-9.]*\) s .*/\1/p'
done | best)
bytes=$(wc -c <"$text")
awk -v b="$bytes" -v c="$cpp" -v j="$js" -v f="$text" 'BEGIN {
  printf "%s: %d bytes\n", f, b
  printf "C++ (mpitron tokenize): %.3f s, %.1f MB/s\n", c, b / 1e6 / c
  printf "JS (gpt-3-encoder):     %.3f s, %.2f MB/s\n", j, b / 1e6 / j
  printf "ratio: C++ is %.1fx faster\n", j / c }'
