#!/usr/bin/env bash
# Translation end to end on a small synthetic pair folder: a SentencePiece model learned by
# `mpitron tokenize --learn`, a GPT trained on source [SEP] target [END] with the loss on the
# target (dropout on), dp 2, pp 2 and tp 2 equal to one rank within 1e-5 (with and without length
# buckets), validation BLEU in the trace,
# `translate` with and without the KV cache giving the same lines, and bad input refused with one
# clear line and no partial output.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
mkdir -p aa-bb
"$PYTHON" - <<'PY'
import random
r = random.Random(3)
src = "uno dos tres cuatro cinco seis siete ocho nueve diez casa perro gato".split()
tgt = "one two three four five six seven eight nine ten house dog cat".split()
def pairs(n):
    out = []
    for _ in range(n):
        k = [r.randrange(len(src)) for _ in range(r.randint(2, 7))]
        out.append((" ".join(src[i] for i in k), " ".join(tgt[i] for i in k)))
    return out
for name, n in (("train", 1500), ("valid", 40)):
    p = pairs(n)
    open(f"aa-bb/{name}.aa", "w").write("".join(a + "\n" for a, _ in p))
    open(f"aa-bb/{name}.bb", "w").write("".join(b + "\n" for _, b in p))
PY
"$MPITRON" tokenize --learn 120 --in aa-bb/train.aa,aa-bb/train.bb --out aa-bb/sp.model | tee learn.log
grep -q "^wrote aa-bb/sp.model: 120 pieces (unk 0, bos 1, eos 2, pad 3)" learn.log || fail "learn line"

# The learnt model applied to a file: a token file, its eos after each of the 40 lines.
"$MPITRON" tokenize --tokenizer aa-bb/sp.model --in aa-bb/valid.aa --out valid_aa.h5 | tee apply.log
grep -q "^wrote valid_aa.h5: [0-9]* SentencePiece tokens from .* (eos 2 after each line), vocab 120" apply.log ||
  fail "tokenize with a SentencePiece model"
"$PYTHON" - <<'PY' || fail "the SentencePiece token file"
import h5py, numpy as np
with h5py.File("valid_aa.h5", "r") as f:
    t = f["tokens"][:]
    assert (t == 2).sum() == 40 and t[-1] == 2 and t.max() < 120, t
    assert f.attrs["tokenizer_format"] in (b"sentencepiece", "sentencepiece"), dict(f.attrs)
PY

base=(--config "$TINY" --set model.task=1 --set model.vocab_size=120 --tokenizer aa-bb/sp.model
  --steps 6 --batch-size 8 --seq-len 32 --eval-every 3 --eval-batches 1
  --dropout 0.1 --threads 1)
run=("${base[@]}" --data aa-bb)
"$MPITRON" train "${run[@]}" --set train.bleu_every=6 --out one | tee one.log
grep -q "pairs aa -> bb, SentencePiece" one.log || fail "the start line names the pairs"
grep -q "bleu [0-9.]*" one.log || fail "no BLEU in the log"
[[ -s one/sp.model ]] || fail "the SentencePiece model is not kept in the run folder"
"$PYTHON" - <<'PY' || fail "val_bleu column"
import h5py, math
with h5py.File("one/trace.h5", "r") as f:
    b = f["trace/val_bleu"][:]
    assert math.isnan(b[0]) and b[-1] >= 0 and not math.isnan(b[-1]), b
PY
# Length buckets: each batch's rows as long as its longest pair (fewer positions than --seq-len).
"$MPITRON" train "${run[@]}" --set train.length_buckets=4 --out bucketed >bucketed.log
"$PYTHON" - <<'PY' || fail "length buckets: the same number of loss terms, another loss"
import h5py
with h5py.File("one/trace.h5", "r") as a, h5py.File("bucketed/trace.h5", "r") as b:
    assert a["trace/loss"][0] != b["trace/loss"][0], "buckets drew the same batch"
PY
for layout in dp pp tp; do
  for buckets in 0 4; do
    name=${layout}2_$buckets
    base_run=$([[ $buckets == 0 ]] && echo one || echo bucketed)
    mpiexec -n 2 "$MPITRON" train "${run[@]}" "--$layout" 2 --set train.length_buckets=$buckets \
      --out "$name" >"$name.log" 2>&1 || fail "--$layout 2: $(tail -3 "$name.log")"
    "$MPITRON" compare "$base_run/trace.h5" "$name/trace.h5" --rtol 1e-5 ||
      fail "--$layout 2 (length buckets $buckets) differs"
  done
done

# The KV cache decodes the tokens the whole prefix gives; beam search runs. (A model that has
# learnt something: one trained six steps ends every line at once.)
"$MPITRON" train "${run[@]}" --steps 150 --eval-every 0 --lr 3e-3 --out long >long_train.log
head -12 aa-bb/valid.aa >src.txt
head -12 aa-bb/valid.bb >ref.txt
"$MPITRON" translate long --in src.txt --out cached.txt --batch-size 5 | tee translate.log
grep -q "^wrote cached.txt: 12 lines, .* tokens/s; greedy, batch 5, KV cache" translate.log ||
  fail "translate's summary line"
"$MPITRON" translate long --in src.txt --out full.txt --no-cache --batch-size 4 >/dev/null
cmp cached.txt full.txt || fail "the KV cache changed the translations"
"$MPITRON" translate long --in src.txt --out beam.txt --beam 3 >/dev/null
[[ $(wc -l <beam.txt) -eq 12 ]] || fail "beam search wrote $(wc -l <beam.txt) lines"
"$MPITRON" bleu cached.txt ref.txt | tee bleu.log
grep -q "^BLEU = " bleu.log || fail "bleu"
grep -q " 0 new tokens" translate.log && fail "the trained model translated nothing"
# A source longer than half the block is cut, and said so.
"$PYTHON" -c "print(' '.join(['uno dos tres'] * 40))" >long.txt
"$MPITRON" translate one --in long.txt --out long_out.txt | tee long.log
grep -q "note: 1 source line(s) longer than 15 tokens were cut to their first 15 (half the 32 tokens" long.log ||
  fail "no note on the cut source"

# Bad input: one line, no partial files.
expect_error() {  # expect_error "message" command...
  local want=$1
  shift
  if "$@" >out.txt 2>err.txt; then fail "accepted: $*"; fi
  grep -qF "$want" err.txt || fail "for $*: expected '$want', got: $(cat err.txt)"
}
printf 'uno\n\ndos\n' >empty_line.txt
expect_error "empty_line.txt:2: an empty line" "$MPITRON" translate one --in empty_line.txt --out x.txt
[[ ! -e x.txt && ! -e x.txt.tmp ]] || fail "a partial output file was left"
"$MPITRON" tokenize --learn 100 --in aa-bb/train.aa,aa-bb/train.bb --out other.model >/dev/null
expect_error "is not the one" "$MPITRON" translate one --in src.txt --out x.txt --tokenizer other.model
data=$(corpus)
"$MPITRON" train --config "$TINY" --data "$data" --steps 1 --batch-size 2 --seq-len 16 \
  --eval-every 0 --out text >/dev/null
expect_error "trained on text, not on sentence pairs" "$MPITRON" translate text --in src.txt --out x.txt
mkdir -p cc-dd
head -20 aa-bb/train.aa >cc-dd/train.cc
head -19 aa-bb/train.bb >cc-dd/train.dd
cp aa-bb/valid.aa cc-dd/valid.cc
cp aa-bb/valid.bb cc-dd/valid.dd
expect_error "train.cc has 20 lines but" "$MPITRON" train "${base[@]}" --data cc-dd --out bad
expect_error "the folder's name must say the direction" "$MPITRON" train "${base[@]}" --data "$WORK" --out bad
mkdir -p relearned
"$MPITRON" tokenize --learn 110 --in aa-bb/train.aa --in aa-bb/train.bb --out relearned/sp.model >/dev/null
expect_error "keeps another SentencePiece model under the name sp.model" \
  "$MPITRON" train "${base[@]}" --data aa-bb --tokenizer relearned/sp.model --resume auto --out one
cmp -s one/sp.model aa-bb/sp.model || fail "the run's kept model was overwritten"
expect_error "was trained on pairs encoded with the SentencePiece model" \
  "$MPITRON" train "${run[@]}" --tokenizer other.model --resume one/ckpt_6.h5 --steps 8 --allow-changes --out one
echo "PASS"
