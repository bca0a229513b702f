#!/usr/bin/env bash
# Checks an archive of io/make_data_archive.sh and unpacks it into DEST (default data, the
# checkout's data/ where the presets' default paths point). The archive must read to its end
# (a truncated or damaged one is refused, naming the member it broke in) and hold MANIFEST and
# exactly the files MANIFEST lists, each of its size and sha256; else nothing is unpacked and the
# message names the file. Files already in DEST are replaced; DEST/MANIFEST records what came.
# Usage: io/unpack_data_archive.sh ARCHIVE [DEST]
set -euo pipefail
if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 ARCHIVE [DEST]   (DEST default: data)" >&2
  exit 2
fi
archive=$1 dest=${2:-data}
die() {
  echo "error: $archive: $*; nothing unpacked" >&2
  exit 1
}
[[ -f $archive ]] || {
  echo "error: no archive $archive" >&2
  exit 1
}
made_dest=
[[ -d $dest ]] || made_dest=1
mkdir -p "$dest"
# Beside DEST, so that the checked files move into place without a second copy.
tmp=$(mktemp -d "$dest/.unpack.XXXXXX")
tmp=$(cd "$tmp" && pwd)
trap 'rm -rf "$tmp"; [[ -z $made_dest ]] || rmdir "$dest" 2>/dev/null || true' EXIT
mkdir "$tmp/x"
root=$tmp/x/mpitron-data

# Why PATH (a MANIFEST entry) is wrong in the unpacked tree; nothing when it is right.
entry_fault() {
  local sum=$1 size=$2 path=$3
  [[ -f $root/$path ]] || {
    echo "$path is in MANIFEST but not in the archive"
    return
  }
  local have
  have=$(stat -c %s "$root/$path")
  [[ $have == "$size" ]] || {
    echo "$path is $have bytes, MANIFEST says $size"
    return
  }
  [[ $(sha256sum <"$root/$path" | cut -d' ' -f1) == "$sum" ]] || echo "$path: sha256 differs from MANIFEST"
}

# -m: the files get the time they were unpacked (the archive's are all 1970, for reproducibility).
if ! tar -xvzmf "$archive" -C "$tmp/x" --no-same-owner >"$tmp/members" 2>"$tmp/tar.err"; then
  why=$(grep -v -e '^tar: Exiting' -e 'Child returned' "$tmp/tar.err" | head -n 2 | paste -sd ' ' |
    sed 's/^ *//; s/ *$//')
  last=$(tail -n 1 "$tmp/members")
  # gzip checks its CRC only at the end: name the first member that came out wrong, if any.
  bad=
  if [[ -f $root/MANIFEST ]]; then
    while read -r sum size path _; do
      [[ ! -f $root/$path || $path == "${last#mpitron-data/}" ]] && continue
      bad=$(entry_fault "$sum" "$size" "$path") && [[ -n $bad ]] && break
    done < <(grep -v '^#' "$root/MANIFEST" || true)
  fi
  die "truncated or corrupt (${bad:+$bad; }tar stopped${last:+ at member $last}): ${why:-tar failed}"
fi
[[ -f $root/MANIFEST ]] || die "holds no mpitron-data/MANIFEST: not an archive of io/make_data_archive.sh"
other=$(find "$tmp/x" -mindepth 1 -maxdepth 1 ! -name mpitron-data -printf '%P\n' | head -n 1)
[[ -z $other ]] || die "$other is outside mpitron-data/"
odd=$(find "$root" -mindepth 1 ! -type f ! -type d -printf '%P\n' | head -n 1)
[[ -z $odd ]] || die "$odd is not a plain file"

# MANIFEST: '#' comments, then "SHA256 SIZE PATH"; a path stays inside DEST.
listed=$tmp/listed
: >"$listed"
grep -v '^#' "$root/MANIFEST" >"$tmp/entries" || die "MANIFEST lists no file"
n=0
while read -r sum size path rest; do
  n=$((n + 1))
  [[ -z $rest && $sum =~ ^[0-9a-f]{64}$ && $size =~ ^[0-9]+$ && -n $path ]] ||
    die "MANIFEST line $n is not 'SHA256 SIZE PATH'"
  [[ $path != /* && /$path/ != */../* && $path != MANIFEST ]] || die "MANIFEST names an unsafe path $path"
  fault=$(entry_fault "$sum" "$size" "$path")
  [[ -z $fault ]] || die "$fault"
  echo "$path" >>"$listed"
done <"$tmp/entries"
extra=$(cd "$root" && find . -type f ! -name MANIFEST -printf '%P\n' | LC_ALL=C sort |
  LC_ALL=C comm -23 - <(LC_ALL=C sort "$listed") | head -n 1)
[[ -z $extra ]] || die "$extra is in the archive but not in MANIFEST"

while IFS= read -r path; do
  mkdir -p "$dest/$(dirname "$path")"
  mv -f "$root/$path" "$dest/$path"
done <"$listed"
mv -f "$root/MANIFEST" "$dest/MANIFEST"
echo "unpacked $n files into $dest (every size and sha256 as in MANIFEST)"
