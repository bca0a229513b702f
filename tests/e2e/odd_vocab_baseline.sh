#!/usr/bin/env bash
# The 1x1x1 baseline for a vocabulary tensor parallelism does not divide (gpt-tiny with 257
# tokens: tp 2 and tp 4 pad it to 258 and 260): writes WORK/trace.h5, WORK/flags and WORK/model
# for layout.sh, with the equivalence baseline's flags.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
sed 's/^vocab_size = 256/vocab_size = 257/' "$TINY" >gpt-tiny-v257.toml
grep -q '^vocab_size = 257' gpt-tiny-v257.toml || fail "could not set vocab_size in $TINY"
echo "--config $WORK/gpt-tiny-v257.toml --data $(corpus)" >model
# The equivalence baseline's flags (tests/e2e/baseline.sh: 20 steps).
echo "--steps 20 --batch-size 24 --seq-len 32 --dropout 0.1 --eval-every 10 --log-every 10 --warmup-steps 5 --lr 1e-3 --ckpt-every 10" >flags
# shellcheck disable=SC2046  # the flags are words
mpiexec -n 1 "$MPITRON" train $(cat model flags) --out .
