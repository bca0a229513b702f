#!/usr/bin/env bash
# The data archive route, as on a cluster without Debian's packages: io/make_data_archive.sh (what
# `make data-archive` runs) builds the archive, twice to the same bytes; then, in a mount namespace
# where `bible` and `diatheke` are off PATH and tmpfs hides /usr/share/datasets (and the KJV's and
# SWORD's data), io/unpack_data_archive.sh unpacks it into a fresh checkout's data/ and
# io/prepare_data.sh finds every preset's data there; it also takes the archive itself
# ($MPITRON_DATA_ARCHIVE, or data/mpitron-data.tar.gz) and unpacks it; without an archive it
# refuses es-en naming `make data-archive`; and gpt-tiny and the MLP train a few steps on the
# unpacked files by their default paths (the MLP by --data where mpitron looks only in Debian's).
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
if ! command -v bible >/dev/null || ! command -v diatheke >/dev/null ||
  ! diatheke -b system -k modulelist 2>/dev/null | grep '^spaRV1909eb ' >/dev/null ||
  [[ ! -s /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]]; then
  echo "SKIP: the archive is made from Debian's bible-kjv, diatheke, sword-text-sparv and dataset-fashion-mnist (make deps)"
  exit 77
fi
if ! unshare -m sh -c 'mount -t tmpfs tmpfs /usr/share/datasets' 2>/dev/null; then
  echo "SKIP: no mount namespace with tmpfs mounts here (unshare -m needs root): cannot hide the packaged data"
  exit 77
fi

"$REPO/io/make_data_archive.sh" a/mpitron-data.tar.gz | tee make.log
"$REPO/io/make_data_archive.sh" b.tar.gz >/dev/null
cmp a/mpitron-data.tar.gz b.tar.gz || fail "two archives of the same packages differ"
manifest=$(tar -xzOf a/mpitron-data.tar.gz mpitron-data/MANIFEST)
for f in kjv.txt kjv_verses.txt es-en/train.es es-en/test.en es-en/valid.ref kjv-qa/train.qa \
  kjv-qa/genealogies.txt fashion-mnist/train-images-idx3-ubyte.gz fashion-mnist/t10k-labels-idx1-ubyte.gz; do
  grep -qE "^[0-9a-f]{64} [0-9]+ $f\$" <<<"$manifest" || fail "MANIFEST lists no $f"
done

# Everything but bible and diatheke on PATH.
mkdir bin
for f in /usr/local/bin/* /usr/bin/* /usr/sbin/* /bin/* /sbin/*; do
  n=${f##*/}
  [[ $n == bible || $n == diatheke || -e bin/$n || ! -x $f ]] || ln -s "$f" "bin/$n"
done
cat >inside.sh <<'SH'
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
mount -t tmpfs tmpfs /usr/share/datasets
for d in /usr/share/sword /usr/share/bible-kjv; do [[ ! -d $d ]] || mount -t tmpfs tmpfs "$d"; done
for f in /usr/lib/bible.data /usr/lib/bible.data.conc; do [[ ! -e $f ]] || mount --bind /dev/null "$f"; done
export PATH=$WORK/bin
! command -v bible >/dev/null && ! command -v diatheke >/dev/null || fail "bible or diatheke still on PATH"
[[ ! -e /usr/share/datasets/fashion-mnist ]] || fail "the packaged Fashion-MNIST is still there"

# Unpacked into a fresh checkout's data/: every preset finds its data there.
mkdir -p fresh
"$REPO/io/unpack_data_archive.sh" a/mpitron-data.tar.gz fresh/data
for c in "$REPO"/configs/*.toml; do
  "$REPO/io/prepare_data.sh" "$c" fresh >prep.log 2>&1 || { cat prep.log; fail "prepare_data ${c##*/}"; }
  grep -q " is there" prep.log || { cat prep.log; fail "${c##*/}: its data was not found in the unpacked archive"; }
  ! grep -qE "Debian's packages|download" prep.log || { cat prep.log; fail "${c##*/}: not from the archive"; }
done
# Debian's default folder missing, the images go to data/fashion-mnist, which mpitron's default
# finds, or the script names the --data to pass.
mkdir -p fresh5
MPITRON_DATA_ARCHIVE=a/mpitron-data.tar.gz "$REPO/io/prepare_data.sh" "$REPO/configs/mlp-fmnist.toml" fresh5 |
  tee prep.log
grep -q "prepared data/fashion-mnist from the data archive" prep.log || fail "Fashion-MNIST not from the archive"
grep -qE "reads data/fashion-mnist by default now|train with --data .*fresh5/data/fashion-mnist" prep.log ||
  fail "the script says neither that the default finds data/fashion-mnist nor which --data to pass"

# The archive itself: $MPITRON_DATA_ARCHIVE, and data/mpitron-data.tar.gz (the scp'd copy).
mkdir -p fresh2 fresh3/data
for c in gpt-tiny bert-testament mt-es-en qa-finetune qa-pretrain mlp-fmnist; do
  MPITRON_DATA_ARCHIVE=a/mpitron-data.tar.gz "$REPO/io/prepare_data.sh" "$REPO/configs/$c.toml" fresh2 |
    tee -a prep2.log
done
grep -q "prepared data/kjv.txt from the data archive" prep2.log || fail "\$MPITRON_DATA_ARCHIVE was not used"
! grep -qE "Debian's packages|download" prep2.log || fail "not from \$MPITRON_DATA_ARCHIVE"
cmp fresh/data/es-en/train.en fresh2/data/es-en/train.en || fail "es-en differs between the two routes"
cmp fresh/data/kjv-qa/train.qa fresh2/data/kjv-qa/train.qa || fail "kjv-qa differs between the two routes"
cp a/mpitron-data.tar.gz fresh3/data/
"$REPO/io/prepare_data.sh" "$REPO/configs/mt-es-en.toml" fresh3 | tee prep.log
grep -q "prepared data/es-en from the data archive" prep.log || fail "data/mpitron-data.tar.gz was not used"

# No package, no archive: the Spanish Bible has no download, and the message says what to do.
mkdir -p fresh4
if "$REPO/io/prepare_data.sh" "$REPO/configs/mt-es-en.toml" fresh4 2>err.log; then fail "es-en prepared from nothing"; fi
grep -q "make data-archive" err.log || { cat err.log; fail "the refusal does not name make data-archive"; }

# A few steps on the unpacked files: gpt-tiny by its default path (relative to fresh), the MLP by --data.
cd fresh
"$MPITRON" train --config "$REPO/configs/gpt-tiny.toml" --steps 3 --batch-size 4 --seq-len 32 \
  --eval-every 0 --out run-gpt | tee gpt.log
grep -q "data data/kjv.txt (4137850 bytes)" gpt.log || fail "gpt-tiny did not train on the unpacked data/kjv.txt"
mlp=(--config "$REPO/configs/mlp-fmnist.toml")
[[ $("$MPITRON" data-path "${mlp[@]}" 2>/dev/null) == data/fashion-mnist ]] || mlp+=(--data data/fashion-mnist)
"$MPITRON" train "${mlp[@]}" --steps 3 --eval-every 0 --out run-mlp | tee mlp.log
grep -q "data data/fashion-mnist (60000 training and 10000 validation images" mlp.log ||
  fail "the MLP did not train on the unpacked Fashion-MNIST"
[[ -s run-gpt/ckpt_3.h5 && -s run-mlp/ckpt_3.h5 ]] || fail "no checkpoints"
SH
WORK=$WORK MPITRON=$MPITRON REPO=$REPO unshare -m bash inside.sh
echo "data archive ok"
