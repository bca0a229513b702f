#!/usr/bin/env bash
# A Spanish-English parallel corpus: the Reina-Valera 1909 (Debian's sword-text-sparv, read with
# diatheke) aligned verse by verse with the King James Bible (bible-kjv), by book, chapter and
# verse. Writes DIR/{train,valid,test}.{es,en}: one verse a line, line k of the two files of a
# split the same verse, and DIR/{train,valid,test}.ref with its reference. The split is by book,
# so no held-out verse has its neighbours in training:
#   test:  Ruth, Jonah, James            valid: Joel, Titus, 1 John          train: the other 60
# Verses empty on one side (two verses the translation merged into one) are left out and counted;
# a reference present on one side only is an error (the two texts no longer line up).
# Usage: io/get_parallel_bible.sh [DIR]   (default data/es-en)
set -euo pipefail
out=${1:-data/es-en}
if [[ $# -gt 1 ]]; then
  echo "error: one argument at most (usage: $0 [DIR])" >&2
  exit 2
fi
if [[ -s "$out/test.en" ]]; then
  echo "$out exists"
  exit 0
fi
for prog in bible:bible-kjv diatheke:diatheke; do
  if ! command -v "${prog%%:*}" >/dev/null 2>&1; then
    echo "error: the '${prog%%:*}' program is missing: apt-get install ${prog##*:}" >&2
    exit 1
  fi
done
if ! diatheke -b system -k modulelist 2>/dev/null | grep '^spaRV1909eb ' >/dev/null; then
  echo "error: the Reina-Valera 1909 module is missing: apt-get install sword-text-sparv" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# "Genesis 1:1: <w ...>EN el principio</w> ..." and "Ge1:1 In the beginning ...": the book is
# numbered by order of appearance (both list the 66 books in canonical order).
diatheke -b spaRV1909eb -f plain -k "Gen 1:1-Rev 22:21" </dev/null |
  awk '
    match($0, /^.* [0-9]+:[0-9]+: /) {
      head = substr($0, 1, RLENGTH - 2); text = substr($0, RLENGTH + 1)
      n = split(head, w, " "); cv = w[n]; book = substr(head, 1, length(head) - length(cv) - 1)
      if (book != last) { ++b; last = book }
      gsub(/<[GH][0-9]+>/, "", text); gsub(/[ \t\r]+/, " ", text); sub(/^ /, "", text); sub(/ $/, "", text)
      print b ":" cv "\t" text
    }' >"$tmp/es"
bible -f "Gen1:1-Rev22:21" </dev/null |
  awk '
    match($0, /^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ /) {
      ref = substr($0, 1, RLENGTH - 1); text = substr($0, RLENGTH + 1)
      match(ref, /^[1-3]?[A-Za-z]+/); book = substr(ref, 1, RLENGTH); cv = substr(ref, RLENGTH + 1)
      if (book != last) { ++b; last = book }
      gsub(/[ \t\r]+/, " ", text); sub(/^ /, "", text); sub(/ $/, "", text)
      print b ":" cv "\t" text
    }' >"$tmp/en"
for side in es en; do
  books=$(cut -d: -f1 "$tmp/$side" | sort -un | wc -l)
  if [[ $books -ne 66 ]]; then
    echo "error: found $books books in the $side text, not 66: is the package complete?" >&2
    exit 1
  fi
done
# Join by reference; split by book number (Ruth 8, Jonah 32, James 59; Joel 29, Titus 56, 1 John 62).
awk -F'\t' -v dir="$tmp" '
  BEGIN {
    split("8 32 59", t, " "); for (i in t) test[t[i]] = 1
    split("29 56 62", v, " "); for (i in v) valid[v[i]] = 1
    names = "Gen Exo Lev Num Deu Josh Judg Ruth 1Sam 2Sam 1Kgs 2Kgs 1Chr 2Chr Ezra Neh Esth Job Ps Prov Eccl Song Isa Jer Lam Ezek Dan Hos Joel Amos Obad Jonah Mic Nah Hab Zeph Hag Zech Mal Matt Mark Luke John Acts Rom 1Cor 2Cor Gal Eph Phil Col 1Thess 2Thess 1Tim 2Tim Titus Phlm Heb Jas 1Pet 2Pet 1John 2John 3John Jude Rev"
    split(names, name, " ")
  }
  FNR == NR { es[$1] = $2; next }
  FNR == 1 { printf "" > (dir "/mismatch") }
  {
    if (!($1 in es)) { ++only_en; if (first_en == "") first_en = $1; next }
    seen[$1] = 1
    if (es[$1] == "" || $2 == "") { ++empty; next }
    split($1, r, ":"); b = r[1] + 0
    s = (b in test) ? "test" : (b in valid) ? "valid" : "train"
    print es[$1] > (dir "/" s ".es"); print $2 > (dir "/" s ".en")
    print name[b] r[2] ":" r[3] > (dir "/" s ".ref")
    ++count[s]
  }
  END {
    for (k in es) if (!(k in seen)) { ++only_es; if (first_es == "") first_es = k }
    printf "%d pairs: train %d, valid %d, test %d; left out: %d only in Spanish, %d only in English, %d empty on one side\n", \
      count["train"] + count["valid"] + count["test"], count["train"], count["valid"], count["test"], \
      only_es, only_en, empty > (dir "/summary")
    if (only_es + only_en > 0)
      printf "%d verse(s) only in Spanish (first %s), %d only in English (first %s) (book:chapter:verse)\n", \
        only_es, first_es, only_en, first_en > (dir "/mismatch")
  }' "$tmp/es" "$tmp/en"
if [[ -s $tmp/mismatch ]]; then
  echo "error: the two Bibles do not line up verse by verse: $(cat "$tmp/mismatch"); nothing written" >&2
  exit 1
fi
mkdir -p "$out"
for s in train valid test; do
  for f in "$s.es" "$s.en" "$s.ref"; do mv "$tmp/$f" "$out/$f"; done
done
echo "wrote $out/{train,valid,test}.{es,en,ref}: $(cat "$tmp/summary")"
