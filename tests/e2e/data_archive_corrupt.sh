#!/usr/bin/env bash
# io/unpack_data_archive.sh on a small archive of io/make_data_archive.sh's layout (mpitron-data/
# with a MANIFEST of "SHA256 SIZE PATH"): a whole one unpacks; a truncated one, one with a byte
# flipped in its compressed stream, one whose member has a flipped byte or another size, a member
# MANIFEST lacks or names without the archive holding it, and an unsafe MANIFEST path are each
# refused, the message naming the archive and the member, with nothing unpacked and DEST as it was.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
unpack=$REPO/io/unpack_data_archive.sh

# pack DIR OUT: DIR/mpitron-data with a MANIFEST of its files, as io/make_data_archive.sh writes it.
pack() {
  (cd "$1/mpitron-data" && {
    echo "# mpitron data archive 1: test"
    find . -type f ! -name MANIFEST -printf '%P\n' | LC_ALL=C sort | while IFS= read -r p; do
      echo "$(sha256sum <"$p" | cut -d' ' -f1) $(stat -c %s "$p") $p"
    done
  } >../MANIFEST.new && mv ../MANIFEST.new MANIFEST)
  tar --sort=name -C "$1" -cf - mpitron-data | gzip -n >"$2"
}
retar() { tar --sort=name -C "$1" -cf - mpitron-data | gzip -n >"$2"; } # MANIFEST as it is
mkdir -p src/mpitron-data/es-en
seq 1 200000 >src/mpitron-data/es-en/train.en
seq 5 300000 | sed 's/$/ uno/' >src/mpitron-data/es-en/train.es
printf 'In the beginning God created the heaven and the earth.\n%.0s' $(seq 1 2000) >src/mpitron-data/kjv.txt
pack src good.tar.gz

# refused ARCHIVE WHAT...: unpacking into dest fails, the message names each WHAT, dest is untouched.
refused() {
  local archive=$1
  shift
  if "$unpack" "$archive" dest 2>err.log; then fail "$archive was unpacked"; fi
  cat err.log
  grep -qF "$archive" err.log || fail "the message does not name $archive"
  for what in "$@"; do grep -qF -- "$what" err.log || fail "the message for $archive does not say '$what'"; done
  grep -q "nothing unpacked" err.log || fail "the message for $archive does not say nothing was unpacked"
  [[ $(cat dest/kjv.txt) == old && ! -e dest/es-en && ! -e dest/MANIFEST ]] || fail "$archive changed dest"
  [[ -z $(find dest -name '.unpack.*') ]] || fail "$archive left a temporary folder in dest"
  if "$unpack" "$archive" new 2>/dev/null; then fail "$archive was unpacked into new"; fi
  [[ ! -e new ]] || fail "a refused $archive left the folder it would have made"
}
mkdir dest
echo old >dest/kjv.txt

size=$(stat -c %s good.tar.gz)
head -c $((size / 2)) good.tar.gz >truncated.tar.gz
refused truncated.tar.gz "truncated or corrupt" "unexpected end of file"
head -c $((size - 5)) good.tar.gz >short.tar.gz
refused short.tar.gz "truncated or corrupt"

cp good.tar.gz stream.tar.gz
printf '\xff' | dd of=stream.tar.gz bs=1 seek=$((size / 3)) conv=notrunc status=none
refused stream.tar.gz "truncated or corrupt"

cp -r src flip
printf 'X' | dd of=flip/mpitron-data/es-en/train.en bs=1 seek=1000 conv=notrunc status=none
retar flip flip.tar.gz
refused flip.tar.gz "es-en/train.en: sha256 differs from MANIFEST"

cp -r src longer
echo extra >>longer/mpitron-data/kjv.txt
retar longer longer.tar.gz
refused longer.tar.gz "kjv.txt is $(($(stat -c %s src/mpitron-data/kjv.txt) + 6)) bytes, MANIFEST says"

cp -r src extra
echo stray >extra/mpitron-data/es-en/stray.txt
retar extra extra.tar.gz
refused extra.tar.gz "es-en/stray.txt is in the archive but not in MANIFEST"

cp -r src lacking
rm lacking/mpitron-data/es-en/train.es
retar lacking lacking.tar.gz
refused lacking.tar.gz "es-en/train.es is in MANIFEST but not in the archive"

cp -r src unsafe
echo "$(sha256sum <src/mpitron-data/kjv.txt | cut -d' ' -f1) 1 ../kjv.txt" >>unsafe/mpitron-data/MANIFEST
retar unsafe unsafe.tar.gz
refused unsafe.tar.gz "unsafe path ../kjv.txt"

echo "not an archive" >text.tar.gz
refused text.tar.gz "truncated or corrupt" "not in gzip format"

# The whole archive: every file, DEST/MANIFEST, and what DEST held besides stays.
echo mine >dest/notes.txt
"$unpack" good.tar.gz dest | tee ok.log
grep -q "unpacked 3 files into dest" ok.log || fail "the whole archive did not unpack its 3 files"
for f in kjv.txt es-en/train.en es-en/train.es MANIFEST; do
  cmp "src/mpitron-data/$f" "dest/$f" || fail "dest/$f differs from the archive's"
done
[[ $(cat dest/notes.txt) == mine ]] || fail "unpacking touched a file the archive does not hold"
echo "data archive corruption ok"
