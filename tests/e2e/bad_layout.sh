#!/usr/bin/env bash
# Impossible layouts are refused on every rank with one clear message, never a hang.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)
common=(--config "$TINY" --data "$data" --steps 2 --seq-len 16)
expect_error "needs 2 ranks but the job has 4" mpiexec -n 4 "$MPITRON" train "${common[@]}" --dp 2 --batch-size 8
expect_error "needs 8 ranks" mpiexec -n 2 "$MPITRON" train "${common[@]}" --dp 2 --tp 2 --pp 2 --batch-size 8
expect_error "not divisible by dp (2) x micro-batches (3)" mpiexec -n 2 "$MPITRON" train "${common[@]}" --dp 2 --micro-batches 3 --batch-size 8
expect_error "not divisible by dp (3)" mpiexec -n 3 "$MPITRON" train "${common[@]}" --dp 3 --batch-size 8
expect_error "ZeRO stage" mpiexec -n 2 "$MPITRON" train "${common[@]}" --dp 2 --zero 3 --batch-size 8
expect_error "dp-reduce" mpiexec -n 2 "$MPITRON" train "${common[@]}" --dp 2 --dp-reduce tree --batch-size 8
expect_error "not supported yet" mpiexec -n 2 "$MPITRON" train "${common[@]}" --pp 2 --batch-size 8
expect_error "n_head (4) is not divisible by --tp 3" mpiexec -n 3 "$MPITRON" train "${common[@]}" --tp 3 --batch-size 8
expect_error "--tp 8 is larger than n_head (4)" mpiexec -n 2 "$MPITRON" train "${common[@]}" --tp 8 --batch-size 8
expect_error "the mlp family runs at --tp 1" mpiexec -n 2 "$MPITRON" train --config "$REPO/configs/mlp-fmnist.toml" --data "$data" --steps 2 --tp 2
# A file only rank 0 opens (the trace) is broken: every rank stops with rank 0's message.
mpiexec -n 2 "$MPITRON" train "${common[@]}" --dp 2 --batch-size 8 --out broken >/dev/null
echo "not a trace" >broken/trace.h5
expect_error "trace broken/trace.h5" mpiexec -n 2 "$MPITRON" train "${common[@]}" --dp 2 --batch-size 8 --steps 4 --out broken --resume auto
echo "bad layouts ok"
