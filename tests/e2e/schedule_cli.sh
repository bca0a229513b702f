#!/usr/bin/env bash
# `mpitron schedule` simulates a pipeline schedule without a model: at pp 4 with 8 micro-batches
# the simulated bubble of GPipe, 1F1B and interleaved 1F1B (2 chunks per rank) equals the
# theoretical (pp - 1) / (V·m + pp - 1), 1F1B keeps pp - rank activation sets where GPipe keeps
# m (and interleaved ranks one more than they run ahead), the send buffers each rank keeps,
# makespans compare in one unit, --png
# writes a PNG (title, axis labels, legend), and an impossible schedule is refused with one clear
# line.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"

# check KIND V WANT_BUBBLE WANT_PEAKS [extra flags...]
check() {
  local kind=$1 v=$2 want_bubble=$3 want_peaks=$4
  shift 4
  "$MPITRON" schedule --pp 4 --micro-batches 8 --schedule "$kind" --virtual-stages "$v" "$@" \
    >"$kind.txt" || fail "mpitron schedule --schedule $kind failed: $(cat "$kind.txt")"
  local line simulated theoretical
  line=$(grep '^bubble: simulated ' "$kind.txt") || fail "$kind: no bubble line: $(cat "$kind.txt")"
  read -r simulated theoretical < <(sed -n 's/^bubble: simulated \([0-9.]*\), theoretical \([0-9.]*\)$/\1 \2/p' <<<"$line")
  [[ -n $simulated && -n $theoretical ]] || fail "$kind: cannot read '$line'"
  [[ $simulated == "$theoretical" ]] || fail "$kind: simulated bubble $simulated, theoretical $theoretical"
  [[ $simulated == "$want_bubble" ]] || fail "$kind: bubble $simulated, expected $want_bubble"
  grep -q "^peak activations in flight per rank: $want_peaks" "$kind.txt" ||
    fail "$kind: expected activations in flight per rank '$want_peaks': $(grep '^peak' "$kind.txt")"
  echo "$kind: $line; $(grep '^peak' "$kind.txt")"
}
# (pp - 1) / (m + pp - 1) = 3/11; interleaved: 3 / (2·8 + 3) = 3/19.
check gpipe 1 0.272727 "8 8 8 8$"
check 1f1b 1 0.272727 "4 3 2 1$"
# The message buffers each rank keeps (the send plan): GPipe one per micro-batch, 1F1B its
# warm-up's; evaluation one micro-batch's sends (the last rank sends none).
grep -q "^send buffers per rank: 8 8 8 8 (training), 1 1 1 0 (evaluation)$" gpipe.txt ||
  fail "gpipe's send buffers: $(grep '^send buffers' gpipe.txt)"
grep -q "^send buffers per rank: 4 4 3 2 (training), 1 1 1 0 (evaluation)$" 1f1b.txt ||
  fail "1f1b's send buffers: $(grep '^send buffers' 1f1b.txt)"
# Interleaved (Megatron-LM): rank r runs (pp - r - 1)·2 + (V - 1)·pp micro-steps ahead, so it holds
# one more than that: 11, 9, 7, 5 chunk activation sets (each chunk's own peak in brackets).
check interleaved 2 0.157895 "11 ([0-9, ]*) 9 ([0-9, ]*) 7 ([0-9, ]*) 5 ([0-9, ]*);" --png interleaved.png
# Makespans in one unit (a stage's forward; an interleaved chunk takes half of it): the smaller
# bubble is the shorter run. 1F1B: (m + pp - 1) x 3 = 33; interleaved: 28.5.
units() { sed -n 's/^makespan .* (\([0-9.]*\) stage forward times).*/\1/p' "$1.txt"; }
[[ $(units 1f1b) == 33 && $(units interleaved) == 28.5 ]] ||
  fail "makespans 1f1b $(units 1f1b), interleaved $(units interleaved) (stage forward times): want 33 and 28.5"
grep -q "^timeline: interleaved.png$" interleaved.txt || fail "no 'timeline: interleaved.png' line"
[[ -s interleaved.png ]] || fail "--png wrote no file"
[[ $(head -c 8 interleaved.png | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] ||
  fail "interleaved.png does not start with the PNG signature"
"$PYTHON" - <<'PY' || fail "interleaved.png is not a complete PNG"
import struct, zlib
data = open("interleaved.png", "rb").read()
pos, chunks = 8, []
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body, crc = data[pos + 8:pos + 8 + n], struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0]
    assert zlib.crc32(kind + body) == crc, f"bad CRC in {kind}"
    chunks.append(kind)
    pos += 12 + n
assert chunks[0] == b"IHDR" and chunks[-1] == b"IEND" and b"IDAT" in chunks, chunks
w, h = struct.unpack(">II", data[16:24])
assert w > 0 and h > 0, (w, h)
print(f"interleaved.png: {w}x{h}, chunks {[c.decode() for c in chunks]}")
PY

# Impossible schedules: one error line, exit 1, and no PNG.
expect_error "--micro-batches 6 is not a multiple of --pp 4" \
  "$MPITRON" schedule --pp 4 --micro-batches 6 --schedule interleaved --virtual-stages 2 --png bad.png
[[ ! -e bad.png ]] || fail "a refused schedule wrote a PNG"
expect_error "--virtual-stages 2 needs --schedule interleaved" \
  "$MPITRON" schedule --pp 4 --micro-batches 8 --schedule gpipe --virtual-stages 2
expect_error "--schedule pipedream is unknown" "$MPITRON" schedule --pp 4 --schedule pipedream
echo "schedule cli ok"
