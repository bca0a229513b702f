#!/usr/bin/env bash
# The 1x1x1 baseline of the equivalence matrix (gpt-tiny, dropout on): the trace every parallel
# layout must reproduce. Writes WORK/trace.h5, WORK/ckpt_*.h5 and WORK/flags (the shared flags).
source "$(dirname "$0")/common.sh"
data=$(corpus)
echo "--steps 40 --batch-size 24 --seq-len 32 --dropout 0.1 --eval-every 20 --log-every 10 --warmup 5 --ckpt-every 20" >flags
mpiexec -n 1 "$MPITRON" train --config "$TINY" --data "$data" $(cat flags) --out .
