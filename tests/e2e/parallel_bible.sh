#!/usr/bin/env bash
# io/get_parallel_bible.sh: with stand-in `bible` and `diatheke` programs on PATH (three books,
# Strong's tags, a verse empty on one side), the files line up by reference, split by book
# (Ruth is a test book), tags are gone and the empty verse is counted out; a reference on one
# side only is refused with nothing written. With Debian's packages installed, the real corpus:
# 31,084 pairs, Ruth 1:1 on line 1 of test.{es,en}. (diatheke's plain format has already dropped
# the <w> markup; the <G5547>-style tags it leaves are the script's to remove.)
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
mkdir -p fake
cat >fake/bible <<'SH'
#!/usr/bin/env bash
# 66 books of one verse each, Genesis with two, book 8 (Ruth) named Ruth; names without digits.
printf 'Ge1:1 In the beginning.\nGe1:2 And the earth.\n'
for b in $(seq 2 66); do
  name=B$(printf '%*s' "$b" '' | tr ' ' x); [[ $b == 8 ]] && name=Ruth
  printf '%s1:1 Verse of book %d.\n' "$name" "$b"
  if [[ -n ${EXTRA_VERSE:-} && $b == 30 ]]; then printf '%s1:2 A verse Spanish lacks.\n' "$name"; fi
done
SH
cat >fake/diatheke <<'SH'
#!/usr/bin/env bash
if [[ $* == *modulelist* ]]; then echo "Biblical Texts:"; echo "spaRV1909eb : Reina Valera 1909"; exit 0; fi
printf 'Genesis 1:1: EN el principio <G5547>.\n'
printf 'Genesis 1:2: %s\n' "${EMPTY_VERSE-Y la tierra.}"
for b in $(seq 2 66); do
  name="Libro $b"; [[ $b == 8 ]] && name=Ruth
  printf '%s 1:1: Verso del libro %d.\n' "$name" "$b"
done
printf '(spaRV1909eb)\n'
SH
chmod +x fake/bible fake/diatheke
PATH=$WORK/fake:$PATH EMPTY_VERSE='' "$REPO/io/get_parallel_bible.sh" out | tee get.log
grep -q "66 pairs: train 60, valid 3, test 3; .* 1 empty on one side" get.log || fail "summary"
[[ $(head -1 out/train.es) == "EN el principio ." ]] || fail "tags left: $(head -1 out/train.es)"
[[ $(head -1 out/test.ref) == "Ruth1:1" && $(head -1 out/test.en) == "Verse of book 8." &&
  $(head -1 out/test.es) == "Verso del libro 8." ]] || fail "Ruth is not the first test pair"
for s in train valid test; do
  [[ $(wc -l <"out/$s.es") == $(wc -l <"out/$s.en") ]] || fail "$s sides differ in length"
done
if PATH=$WORK/fake:$PATH EXTRA_VERSE=1 "$REPO/io/get_parallel_bible.sh" out2 2>err.txt; then
  fail "a reference on one side only was accepted"
fi
grep -q "do not line up verse by verse: 0 verse(s) only in Spanish .*, 1 only in English (first 30:1:2)" err.txt ||
  fail "mismatch message: $(cat err.txt)"
[[ ! -e out2 ]] || fail "files were written for a corpus that does not line up"

if command -v diatheke >/dev/null && diatheke -b system -k modulelist 2>/dev/null | grep spaRV1909eb >/dev/null; then
  "$REPO/io/get_parallel_bible.sh" real | tee real.log
  grep -q "31084 pairs: train 30620, valid 224, test 240" real.log || fail "the real corpus' counts"
  [[ $(head -1 real/test.en) == "Now it came to pass in the days when the judges ruled"* ]] ||
    fail "test.en does not start with Ruth 1:1"
  [[ $(head -1 real/test.es) == "Y ACONTECIÓ en los días que gobernaban los jueces"* ]] ||
    fail "test.es does not start with Ruth 1:1"
else
  echo "note: sword-text-sparv or diatheke missing: the real corpus is not checked"
fi
echo "PASS"
