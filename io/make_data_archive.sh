#!/usr/bin/env bash
# One portable archive of every preset's data, made from Debian's packages (bible-kjv; diatheke with
# sword-text-sparv; dataset-fashion-mnist), for machines that have none of them (a cluster's login
# node: scp it there, then io/unpack_data_archive.sh). It holds, under mpitron-data/:
#   kjv.txt  kjv_verses.txt  es-en/{train,valid,test}.{es,en,ref}  kjv-qa/  fashion-mnist/*.gz
# and MANIFEST: "SHA256 SIZE PATH" for each file, after '#' lines naming the package versions.
# Reproducible: the same packages give the same bytes (sorted members, fixed times and owners).
# Usage: io/make_data_archive.sh [OUT]   (default data/mpitron-data.tar.gz)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-data/mpitron-data.tar.gz}
if [[ $# -gt 1 ]]; then
  echo "error: one argument at most (usage: $0 [OUT])" >&2
  exit 2
fi
fmnist=${MPITRON_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
fmnist_files=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz
  t10k-labels-idx1-ubyte.gz)
missing=()
command -v bible >/dev/null 2>&1 || missing+=(bible-kjv)
command -v diatheke >/dev/null 2>&1 || missing+=(diatheke)
if command -v diatheke >/dev/null 2>&1 &&
  ! diatheke -b system -k modulelist 2>/dev/null | grep '^spaRV1909eb ' >/dev/null; then
  missing+=(sword-text-sparv)
fi
for f in "${fmnist_files[@]}"; do
  [[ -s $fmnist/$f ]] || {
    missing+=(dataset-fashion-mnist)
    break
  }
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "error: the archive is made from Debian's packages: apt-get install ${missing[*]}" >&2
  exit 1
fi

mkdir -p "$(dirname "$out")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
d=$tmp/mpitron-data
mkdir -p "$d/fashion-mnist"
"$here/get_bible.sh" "$d/kjv.txt" >/dev/null
"$here/get_bible.sh" "$d/kjv_verses.txt" --references >/dev/null
"$here/get_parallel_bible.sh" "$d/es-en" >/dev/null
(cd "$d" && python3 "$here/get_kjv_qa.py" kjv.txt kjv-qa --restate >/dev/null)  # no temporary path in summary.txt
for f in "${fmnist_files[@]}"; do cp "$fmnist/$f" "$d/fashion-mnist/$f"; done

version() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo unknown; }
{
  echo "# mpitron data archive 1: SHA256 SIZE PATH of every file (io/unpack_data_archive.sh checks them)"
  echo "# kjv.txt kjv_verses.txt kjv-qa/: bible-kjv $(version bible-kjv-text)"
  echo "# es-en/: sword-text-sparv $(version sword-text-sparv) with bible-kjv (io/get_parallel_bible.sh)"
  echo "# fashion-mnist/: dataset-fashion-mnist $(version dataset-fashion-mnist)"
  (cd "$d" && find . -type f ! -name MANIFEST -printf '%P\n' | LC_ALL=C sort |
    while IFS= read -r p; do echo "$(sha256sum <"$p" | cut -d' ' -f1) $(stat -c %s "$p") $p"; done)
} >"$tmp/MANIFEST"
mv "$tmp/MANIFEST" "$d/MANIFEST"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --mode=u+rw,go+r,go-w \
  -C "$tmp" -cf - mpitron-data | gzip -n >"$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out ($(wc -c <"$out") bytes, $(grep -vc '^#' "$d/MANIFEST") files; sha256 $(sha256sum <"$out" | cut -d' ' -f1))"
