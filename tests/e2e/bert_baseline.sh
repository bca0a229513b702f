#!/usr/bin/env bash
# The 1x1x1 baseline of the encoder's equivalence rows, dropout on: writes WORK/trace.h5 and, for
# layout.sh, WORK/flags and WORK/model.
# Usage: bert_baseline.sh MPITRON REPO WORK TASK   (TASK: mlm, testament or pairs)
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
task=$4
# 2 layers, 4 heads, width 32: every row runs in seconds.
shape="--set model.n_layer=2 --set model.n_embd=32 --batch-size 16 --dropout 0.1"
case $task in
  mlm) echo "--config $REPO/configs/bert-mlm.toml --data $(corpus) $shape --seq-len 32" >model ;;
  testament | pairs)
    echo "--config $REPO/configs/bert-$task.toml --data $(verses) $shape --seq-len 48" >model ;;
  *) fail "unknown task $task" ;;
esac
echo "--steps 12 --eval-every 6 --eval-batches 2 --log-every 6 --warmup-steps 3 --ckpt-every 6 --lr 2e-3" >flags
# shellcheck disable=SC2046  # the flags are words
mpiexec -n 1 "$MPITRON" train $(cat model flags) --out .
