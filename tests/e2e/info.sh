#!/usr/bin/env bash
# `mpitron info`: a checkpoint gets a short summary (model, run settings, step, tensor counts,
# repeated blocks) that agrees with the trainer and with the file itself; --all lists every
# dataset; a trace keeps its listing and gains one line per run segment with what changed.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)

small=(--steps 4 --batch-size 8 --seq-len 16 --eval-every 0)
"$MPITRON" train --config "$TINY" --data "$data" "${small[@]}" --out run >train.txt 2>&1 ||
  fail "training failed: $(cat train.txt)"
ckpt=run/ckpt_4.h5
[[ -e $ckpt ]] || fail "no checkpoint"
params=$(sed -n 's/.*(gpt): \([0-9][0-9]*\) parameters.*/\1/p' train.txt | head -1)
[[ -n $params ]] || fail "the trainer printed no parameter count: $(cat train.txt)"

"$MPITRON" info $ckpt >info.txt
cat info.txt
# want REGEX what: info.txt has a line matching the extended regular expression.
want() { grep -Eq -- "$1" info.txt || fail "info: no line matching '$1' ($2)"; }
# has GROUP CELL: the settings line "GROUP: k=v k=v ..." or its continuation lines hold CELL.
has() {
  awk -v g="$1:" '$1 == g { on = 1; print; next } on && /^ / { print; next } { on = 0 }' info.txt |
    tr -s ' ' '\n' | grep -qxF -- "$2" || fail "info: no $2 among the $1 settings"
}

lines=$(wc -l <info.txt)
[[ $lines -lt 40 ]] || fail "info $ckpt printed $lines lines, expected a summary under 40"
want "^$ckpt: mpitron checkpoint, step 4, tokens seen 512" "kind, step and tokens seen"
n_layer=$(sed -n 's/^n_layer *= *\([0-9]*\).*/\1/p' "$TINY")
n_embd=$(sed -n 's/^n_embd *= *\([0-9]*\).*/\1/p' "$TINY")
want '^model: +type="gpt" ' "model.type first"
has model "n_layer=$n_layer"
has model "n_embd=$n_embd"
has model vocab_size=256
want '^run: +config="gpt-tiny" +optimizer="adamw" +seed=1337$' "config, optimizer and seed"
has train batch_size=8
has train seq_len=16
has train steps=4
want "^layout: +dp=1 +pp=1 +tp=1 +zero=0$" "layout"
want "^parameters: $params in [0-9]+ tensors under /params" "the trainer's parameter count"
want "^optimizer: .*moments m, v of every parameter" "AdamW moments present"
want "^buffers: +none$" "gpt has no buffers"
grep -q '^  /params/' info.txt && fail "the summary lists datasets one by one"

# The blocks line against the file itself: tensors and elements of h.0, and of the rest.
read -r tensors each outside < <("$PYTHON" -c "
import sys, h5py, math
with h5py.File(sys.argv[1], 'r') as f:
    p = f['params']
    block = [k for k in p if k.startswith('h.0.')]
    rest = [k for k in p if not k.startswith('h.')]
    size = lambda ks: sum(math.prod(p[k].shape) for k in ks)
    print(len(block), size(block), size(rest))" $ckpt)
want "^blocks: +h\.0 \.\. h\.$((n_layer - 1)): $n_layer blocks x $tensors tensors, $each elements each$" \
  "blocks grouped on h.<i>"
want "^ +outside blocks: 4 tensors, $outside elements \(ln_f.bias, ln_f.weight, wpe.weight, wte.weight\)$" \
  "tensors outside the blocks"
[[ $((n_layer * each + outside)) == "$params" ]] ||
  fail "$n_layer x $each + $outside is not the parameter count $params"
want "^largest: +h\.\*\.mlp\.c_fc\.weight +\(512,$n_embd\) +$((512 * n_embd)) elements x $n_layer$" \
  "largest tensor, once for all blocks"

# The trace: its listing as before, then the run segments; a resume with a changed lr is a second
# segment naming the change.
"$MPITRON" train --config "$TINY" --data "$data" "${small[@]}" --steps 6 --lr 1e-3 \
  --out run --resume auto --allow-changes >resume.txt 2>&1 || fail "resume failed: $(cat resume.txt)"
"$MPITRON" info run/trace.h5 >info.txt
cat info.txt
want "^run/trace.h5: mpitron loss trace$" "kind"
want "^  /trace/loss +float64 +\(6\)$" "dataset listing"
want "^steps: 1 \.\. 6 \(6 rows\)$" "step range"
want "^segment 0: from step 1$" "first segment"
want "^segment 1: from step 5, .*train\.lr 0\.003 -> 0\.001" "second segment and its change"
[[ $(grep -c '^segment' info.txt) == 2 ]] || fail "expected two segment lines"
grep -q '^group /segments' info.txt && fail "the trace summary dumps the segments' attributes"

# --all: every dataset of the checkpoint, one line each, as before the summary existed.
"$MPITRON" info --all run/ckpt_6.h5 >all.txt || fail "info --all failed"
ndata=$("$PYTHON" -c "
import sys, h5py
n = []
h5py.File(sys.argv[1], 'r').visititems(lambda k, v: n.append(k) if isinstance(v, h5py.Dataset) else None)
print(len(n))" run/ckpt_6.h5)
[[ $(grep -c '^  /' all.txt) == "$ndata" ]] || fail "info --all does not list the $ndata datasets"
grep -q "^parameters: $params in " all.txt || fail "info --all lacks the parameter count"

expect_error "does not exist" "$MPITRON" info missing.h5
echo "info ok"
