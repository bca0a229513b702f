#!/usr/bin/env bash
# The 1x1x1 baseline of the equivalence matrix (gpt-tiny, dropout on): the trace every parallel
# layout must reproduce. Writes WORK/trace.h5, WORK/ckpt_*.h5 and WORK/flags (the shared flags).
# lr 1e-3 keeps training in a stable regime: at gpt-tiny's 3e-3 the tiny model sits at the edge of
# stability and fp32 round-off from any change of summation order (even micro-batching in one
# process) grows to 1e-3 within 30 steps, while here it stays near 1e-8.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)
# 20 steps (it was 40): warm-up, cosine decay, two evaluations and a mid-run checkpoint, and a
# layout's error (a shard, a reduction, a mask) shows from the first step; half the matrix's time.
echo "--steps 20 --batch-size 24 --seq-len 32 --dropout 0.1 --eval-every 10 --log-every 10 --warmup-steps 5 --lr 1e-3 --ckpt-every 10" >flags
# shellcheck disable=SC2046  # the flags are words
mpiexec -n 1 "$MPITRON" train --config "$TINY" --data "$data" $(cat flags) --out .
