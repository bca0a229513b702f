#!/usr/bin/env bash
# Downloads URL to OUT only if its sha256 is SHA256: the download goes to OUT.part, and a file whose
# checksum differs is deleted and refused, naming both sums, so OUT is never a wrong file. Any URL
# curl reads works, file:// too (how the tests check this step without a network).
# Usage: io/fetch_checked.sh URL SHA256 OUT
set -euo pipefail
if [[ $# -ne 3 ]]; then
  echo "usage: $0 URL SHA256 OUT" >&2
  exit 2
fi
url=$1 want=${2,,} out=$3
if [[ ! $want =~ ^[0-9a-f]{64}$ ]]; then
  echo "error: '$2' is not a sha256 (64 hex digits)" >&2
  exit 2
fi
if ! command -v curl >/dev/null 2>&1; then
  echo "error: curl is missing: it downloads $url" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
rm -f "$out.part"
# Bounded: a login node without a route out would otherwise wait for minutes.
if ! curl -fsSL --connect-timeout 30 --retry 2 -o "$out.part" "$url"; then
  rm -f "$out.part"
  echo "error: could not download $url" >&2
  exit 1
fi
got=$(sha256sum "$out.part" | cut -d' ' -f1)
if [[ $got != "$want" ]]; then
  rm -f "$out.part"
  echo "error: $url has sha256 $got, not the expected $want: refused, $out not written" >&2
  exit 1
fi
mv "$out.part" "$out"
echo "fetched $out ($(wc -c <"$out") bytes, sha256 checked)"
