#!/usr/bin/env bash
# Prepares the data one preset reads by default, under ROOT (default: the current folder, against
# which mpitron resolves a relative data path), from the first source that has it:
#   1. Debian's packages: bible-kjv; diatheke with sword-text-sparv; dataset-fashion-mnist.
#   2. An archive of io/make_data_archive.sh (`make data-archive`): $MPITRON_DATA_ARCHIVE (the
#      .tar.gz, or a folder io/unpack_data_archive.sh unpacked it into), else
#      ROOT/data/mpitron-data.tar.gz, checked and unpacked into ROOT/data.
#   3. A download of Debian's own packages, each checked against its sha256 (io/fetch_checked.sh):
#      Fashion-MNIST anywhere; the KJV where Debian's `bible` program runs (x86-64, glibc 2.34 or
#      later). The Spanish Bible has none (diatheke needs the SWORD library): take the archive.
#      The tests run offline: of this route they check only the sha256 step.
# Which data: `mpitron data-path --config CONFIG` where the binary ($MPITRON, else build/mpitron)
# has it; else the family defaults of src/model/family.cpp, read off the config (below);
# $MPITRON_DATA_PATH, where set, instead (what `--data` will name).
# Usage: io/prepare_data.sh [--path] CONFIG [ROOT]   (--path: print the path, prepare nothing)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
only_path=
if [[ ${1:-} == --path ]]; then
  only_path=1
  shift
fi
if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 [--path] CONFIG [ROOT]   (ROOT default: the current folder)" >&2
  exit 2
fi
config=$1 root=${2:-.}
[[ -f $config ]] || {
  echo "error: no config file $config" >&2
  exit 2
}
[[ -d $root ]] || {
  echo "error: no folder $root" >&2
  exit 2
}
config=$(realpath "$config")
archive=${MPITRON_DATA_ARCHIVE:-}
[[ -z $archive ]] || archive=$(realpath "$archive")
mpitron=${MPITRON:-$(dirname "$here")/build/mpitron}
[[ ! -x $mpitron ]] || mpitron=$(realpath "$mpitron")
cd "$root"
fmnist_pkg=${MPITRON_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
fmnist_files=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz
  t10k-labels-idx1-ubyte.gz)
# dataset-fashion-mnist's files (also the archive's), as the download route checks them.
fmnist_sha256=(b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7
  0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056
  cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa
  8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05)
es_en_files=(train.es train.en train.ref valid.es valid.en valid.ref test.es test.en test.ref)

default_path() {
  local p
  if [[ -n ${MPITRON_DATA_PATH:-} ]]; then
    echo "$MPITRON_DATA_PATH"
    return
  fi
  if [[ -x $mpitron ]] && p=$("$mpitron" data-path --config "$config" 2>/dev/null) &&
    p=$(printf '%s\n' "$p" | sed '/^[[:space:]]*$/d' | tail -n 1) && [[ -n $p ]]; then
    echo "$p"
    return
  fi
  # Else: [data] path, else family.cpp's default_data by [model] type and task (the images:
  # data/fashion-mnist where it is a folder, else Debian's), except BERT's tasks 1 and 2, which
  # read the verses with references (default_data_hint).
  local path type task
  IFS=$'\x1f' read -r path type task < <(awk '
    /^[[:space:]]*\[/ { s = $0; gsub(/[][[:space:]]/, "", s); next }
    {
      line = $0; sub(/^[[:space:]]*/, "", line)
      if (line ~ /^#/ || line !~ /=/) next
      key = line; sub(/[[:space:]]*=.*/, "", key)
      val = line; sub(/^[^=]*=[[:space:]]*/, "", val)
      if (val ~ /^"/) { sub(/^"/, "", val); sub(/".*/, "", val) } else { sub(/[[:space:]]*#.*/, "", val) }
      v[s "." key] = val
    }
    END { printf "%s\037%s\037%s\n", v["data.path"], v["model.type"], v["model.task"] }' "$config")
  if [[ -n $path ]]; then
    echo "$path"
    return
  fi
  case $type in
    gpt) [[ ${task:-0} == 1 ]] && echo data/es-en || echo data/kjv.txt ;;
    bert) [[ ${task:-0} == 0 ]] && echo data/kjv.txt || echo data/kjv_verses.txt ;;
    mlp | alexnet | resnet) [[ -d data/fashion-mnist ]] && echo data/fashion-mnist || echo "$fmnist_pkg" ;;
    *)
      echo "error: $config: model type '$type' has no known default data" >&2
      exit 1
      ;;
  esac
}

# complete KIND DIR_OR_FILE: whether the data is all there.
complete() {
  local f
  case $1 in
    kjv | verses) [[ -s $2 ]] ;;
    es-en) for f in "${es_en_files[@]}"; do [[ -s $2/$f ]] || return 1; done ;;
    kjv-qa) for f in train.qa valid.qa genealogies.txt; do [[ -s $2/$f ]] || return 1; done ;;
    fashion-mnist)
      for f in "${fmnist_files[@]}"; do [[ -s $2/$f || -s $2/${f%.gz} ]] || return 1; done
      ;;
  esac
}

member() { # the item's name in the archive
  case $1 in
    kjv) echo kjv.txt ;;
    verses) echo kjv_verses.txt ;;
    *) echo "$1" ;;
  esac
}

# Copies item KIND from FROM to TARGET (a file, or a folder's files), unless they are one.
copy_item() {
  local kind=$1 from=$2 target=$3
  [[ $(realpath -m "$from") != $(realpath -m "$target") ]] || return 0
  mkdir -p "$(dirname "$target")"
  if [[ -d $from ]]; then
    mkdir -p "$target"
    cp "$from"/* "$target/"
  else
    cp "$from" "$target.tmp"
    mv "$target.tmp" "$target"
  fi
  complete "$kind" "$target"
}

has_bible() { command -v bible >/dev/null 2>&1; }

has_packages() {
  case $1 in
    kjv | verses | kjv-qa) has_bible ;;
    es-en)
      has_bible && command -v diatheke >/dev/null 2>&1 &&
        diatheke -b system -k modulelist 2>/dev/null | grep '^spaRV1909eb ' >/dev/null
      ;;
    fashion-mnist) complete fashion-mnist "$fmnist_pkg" ;;
  esac
}

from_packages() {
  local kind=$1 target=$2
  case $kind in
    kjv) "$here/get_bible.sh" "$target" ;;
    verses) "$here/get_bible.sh" "$target" --references ;;
    kjv-qa) qa_from_kjv "$target" ;;
    es-en) "$here/get_parallel_bible.sh" "$target" ;;
    fashion-mnist) copy_item fashion-mnist "$fmnist_pkg" "$target" ;;
  esac
}

qa_from_kjv() {
  prepare kjv data/kjv.txt
  python3 "$here/get_kjv_qa.py" data/kjv.txt "$1" --restate
}

find_archive() {
  if [[ -z $archive && -f data/mpitron-data.tar.gz ]]; then
    archive=$(realpath data/mpitron-data.tar.gz)
  fi
  [[ -n $archive ]]
}

from_archive() {
  local kind=$1 target=$2 name
  name=$(member "$kind")
  if [[ -d $archive ]]; then
    [[ -f $archive/MANIFEST ]] || {
      echo "error: $archive holds no MANIFEST: not a folder io/unpack_data_archive.sh made" >&2
      exit 1
    }
    complete "$kind" "$archive/$name" || {
      echo "error: $archive (an unpacked data archive) lacks $name" >&2
      exit 1
    }
    copy_item "$kind" "$archive/$name" "$target"
    return
  fi
  complete "$kind" "data/$name" || "$here/unpack_data_archive.sh" "$archive" data
  copy_item "$kind" "data/$name" "$target"
}

# Debian's pool, and the snapshot archive that keeps a file once the pool has dropped it; or
# only $MPITRON_DEBIAN_MIRROR (a mirror's root, file:// too).
downloads=()
trap 'rm -rf "${downloads[@]}"' EXIT
debian_urls=(https://deb.debian.org/debian/pool/main
  https://snapshot.debian.org/archive/debian/20240601T000000Z/pool/main)
[[ -z ${MPITRON_DEBIAN_MIRROR:-} ]] || debian_urls=("$MPITRON_DEBIAN_MIRROR/pool/main")
fetch_deb() { # POOL_PATH SHA256 OUT_DIR: the package's files unpacked into OUT_DIR
  local base deb=$3/${1##*/}
  for base in "${debian_urls[@]}"; do
    if "$here/fetch_checked.sh" "$base/$1" "$2" "$deb"; then
      (cd "$3" && ar x "$deb" && tar -xf data.tar.* && rm -f data.tar.* control.tar.* debian-binary)
      return 0
    fi
  done
  return 1
}

download() {
  local kind=$1 target=$2 dl i f
  dl=$(mktemp -d)
  downloads+=("$dl")
  case $kind in
    kjv | verses)
      [[ $(uname -m) == x86_64 ]] || return 1
      fetch_deb b/bible-kjv/bible-kjv_4.38_amd64.deb \
        75a49c032a6efa9faa2beb4a9acb70974380122906329d0e100de36cc88ff02d "$dl" &&
        fetch_deb b/bible-kjv/bible-kjv-text_4.38_all.deb \
          d61b6aad4c51ba9e2800b825325fa6a09e99a0d02a9bb6dc4724fcc4995a1b7a "$dl" || return 1
      mkdir -p "$dl/bin"
      printf '#!/bin/sh\nexec "%s/usr/bin/bible" -p "%s/usr/lib/" "$@"\n' "$dl" "$dl" >"$dl/bin/bible"
      chmod +x "$dl/bin/bible"
      if ! "$dl/bin/bible" -f Gen1:1 </dev/null >/dev/null 2>&1; then
        echo "note: Debian's bible program does not run here (it needs glibc 2.34 or later)" >&2
        return 1
      fi
      if [[ $kind == kjv ]]; then
        PATH=$dl/bin:$PATH "$here/get_bible.sh" "$target"
      else
        PATH=$dl/bin:$PATH "$here/get_bible.sh" "$target" --references
      fi
      ;;
    kjv-qa) qa_from_kjv "$target" ;;
    fashion-mnist)
      fetch_deb d/dataset-fashion-mnist/dataset-fashion-mnist_0.0%7egit20200523.55506a9-1_all.deb \
        39e172fe32dd318ebb3e512220c3beea2fa47d7e20bab348fb4e0922d6beefc0 "$dl" || return 1
      for i in "${!fmnist_files[@]}"; do
        f=$dl/usr/share/datasets/fashion-mnist/${fmnist_files[i]}
        [[ $(sha256sum <"$f" | cut -d' ' -f1) == "${fmnist_sha256[i]}" ]] || {
          echo "error: ${fmnist_files[i]} in the downloaded package has another sha256" >&2
          exit 1
        }
      done
      copy_item fashion-mnist "$dl/usr/share/datasets/fashion-mnist" "$target"
      ;;
    *) return 1 ;;
  esac
}

# prepare KIND TARGET: from the first source that has it.
prepare() {
  local kind=$1 target=$2 how
  if complete "$kind" "$target"; then
    echo "$target is there"
    return
  fi
  if has_packages "$kind"; then
    from_packages "$kind" "$target"
    how="Debian's packages"
  elif find_archive; then
    from_archive "$kind" "$target"
    how="the data archive $archive"
  elif download "$kind" "$target"; then
    how="a download (sha256 checked)"
  else
    echo "error: cannot prepare $target: no Debian package, no data archive" \
      "(\$MPITRON_DATA_ARCHIVE or data/mpitron-data.tar.gz; \`make data-archive\` makes one on a" \
      "Debian machine with the packages)$([[ $kind == es-en ]] || echo ", and the download failed")" >&2
    exit 1
  fi
  complete "$kind" "$target" || {
    echo "error: $target is incomplete after preparing it from $how" >&2
    exit 1
  }
  echo "prepared $target from $how"
}

path=$(default_path)
if [[ -n $only_path ]]; then
  echo "$path"
  exit 0
fi
case ${path##*/} in
  kjv.txt) kind=kjv ;;
  kjv_verses.txt) kind=verses ;;
  es-en) kind=es-en ;;
  kjv-qa) kind=kjv-qa ;;
  genealogies.txt) kind=kjv-qa path=${path%/*} ;;
  fashion-mnist) kind=fashion-mnist ;;
  *)
    if [[ -e $path ]]; then
      echo "$path is there (${config##*/} reads it; this script prepares no such data)"
      exit 0
    fi
    echo "error: ${config##*/} reads $path, which this script does not know how to prepare" >&2
    exit 1
    ;;
esac
if [[ $kind == fashion-mnist && $path == "$fmnist_pkg" ]] && ! complete fashion-mnist "$path"; then
  # The default is Debian's folder; without the package, the same files go to data/.
  prepare fashion-mnist data/fashion-mnist
  if [[ $(default_path) == data/fashion-mnist ]]; then
    echo "${config##*/} reads data/fashion-mnist by default now"
  else
    echo "note: ${config##*/} reads $path by default, which is missing here: train with" \
      "--data $(realpath data/fashion-mnist) (Slurm jobs: DATA=data/fashion-mnist)"
  fi
else
  prepare "$kind" "$path"
fi
