#!/usr/bin/env bash
# validate/qa_cloze_probe.py without OMP_NUM_THREADS in its environment: it sets its own threads
# before torch loads (without them torch's first matrix product spun for ever), so it answers
# within a minute on a 2-step span-corruption checkpoint and a hand-made QA folder, printing one
# line per split. Skips (77) where no Python imports torch.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
if [[ -z $TORCH_PYTHON ]]; then
  echo "SKIP: no Python here imports torch, h5py and numpy"
  exit 77
fi
mkdir qa
mark=$(printf '\u2047')
cat >qa/genealogies.txt <<'TEXT'
And Seth lived an hundred and five years, and begat Enos:
And Enos lived ninety years, and begat Cainan:
And Noah begat Shem, Ham, and Japheth.
TEXT
printf 'Who was the father of Enos?%sSeth\nWho was the father of Cainan?%sEnos\n' "$mark" "$mark" >qa/train.qa
printf 'Who was the father of Shem?%sNoah\n' "$mark" >qa/valid.qa
# The probe's prompts are up to 112 bytes and the answer: a 128-token block.
"$MPITRON" train --config "$TINY" --data "$(corpus)" --set train.objective=span_corruption \
  --set model.vocab_size=259 --set model.block_size=128 --seq-len 128 --steps 2 --batch-size 4 \
  --eval-every 0 --threads 1 --out pre >pre.log 2>&1 || fail "pretraining: $(tail -3 pre.log)"
rc=0
start=$(date +%s)
env -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS -u MKL_NUM_THREADS timeout 60 \
  "$TORCH_PYTHON" "$REPO/validate/qa_cloze_probe.py" pre/ckpt_2.h5 qa >probe.txt 2>&1 || rc=$?
cat probe.txt
[[ $rc != 124 ]] || fail "the probe hung (60 s) without OMP_NUM_THREADS"
[[ $rc == 0 ]] || fail "the probe failed (exit $rc)"
grep -qE "^train: [0-9]+ of 2 fathers filled .*, 0 questions without a verse naming both$" probe.txt ||
  fail "no train line for both questions"
grep -qE "^valid: [0-9]+ of 1 fathers filled .*, 0 questions without a verse naming both$" probe.txt ||
  fail "no valid line"
echo "PASS ($(($(date +%s) - start)) s)"
