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
# Pipeline layouts (gpt-tiny has 4 blocks).
expect_error "more stages than blocks" mpiexec -n 5 "$MPITRON" train "${common[@]}" --pp 5 --batch-size 8
expect_error "--pp 2 x --virtual-stages 4 makes 8 pipeline stages for 4 blocks (n_layer, or 3 x blocks_per_stage): more stages than blocks" \
  mpiexec -n 2 "$MPITRON" train "${common[@]}" --pp 2 --schedule interleaved --virtual-stages 4 --micro-batches 2 --batch-size 8
expect_error "global batch 8 is not divisible by dp (1) x micro-batches (3)" \
  mpiexec -n 2 "$MPITRON" train "${common[@]}" --pp 2 --micro-batches 3 --batch-size 8
expect_error "global batch 8 is not divisible by dp (2) x micro-batches (8)" \
  mpiexec -n 4 "$MPITRON" train "${common[@]}" --dp 2 --pp 2 --micro-batches 8 --batch-size 8
sed 's/^n_layer = 4$/n_layer = 6/' "$TINY" >six_blocks.toml
grep -qx "n_layer = 6" six_blocks.toml || fail "could not make a 6-block config from $TINY"
expect_error "the model's 6 blocks (n_layer, or 3 x blocks_per_stage) do not divide by --pp 2 x --virtual-stages 2" \
  mpiexec -n 2 "$MPITRON" train --config six_blocks.toml --data "$data" --steps 2 --seq-len 16 --batch-size 8 \
  --pp 2 --schedule interleaved --virtual-stages 2 --micro-batches 2
expect_error "--micro-batches 3 is not a multiple of --pp 2" \
  mpiexec -n 2 "$MPITRON" train "${common[@]}" --pp 2 --schedule interleaved --virtual-stages 2 --micro-batches 3 --batch-size 6
expect_error "--stage-layers sums to 5 blocks but the model has 4" \
  mpiexec -n 2 "$MPITRON" train "${common[@]}" --pp 2 --stage-layers 2,3 --batch-size 8
expect_error "--stage-layers lists 3 stages but --pp is 2" \
  mpiexec -n 2 "$MPITRON" train "${common[@]}" --pp 2 --stage-layers 1,1,2 --batch-size 8
expect_error "--stage-layers gives stage 0 0 blocks" \
  mpiexec -n 2 "$MPITRON" train "${common[@]}" --pp 2 --stage-layers 0,4 --batch-size 8
expect_error "--stage-layers chooses the blocks of gpipe and 1f1b stages" \
  mpiexec -n 2 "$MPITRON" train "${common[@]}" --pp 2 --schedule interleaved --virtual-stages 2 --micro-batches 2 --stage-layers 2,2 --batch-size 8
expect_error "--zero 2 reduces gradients while backward runs" \
  mpiexec -n 4 "$MPITRON" train "${common[@]}" --dp 2 --pp 2 --zero 2 --batch-size 8
expect_error "--bucket-mb overlaps the gradient reduction with backward" \
  mpiexec -n 4 "$MPITRON" train "${common[@]}" --dp 2 --pp 2 --bucket-mb 0.25 --batch-size 8
expect_error "--virtual-stages 2 needs --schedule interleaved" \
  mpiexec -n 2 "$MPITRON" train "${common[@]}" --pp 2 --virtual-stages 2 --batch-size 8
expect_error "--schedule pipedream is unknown" mpiexec -n 2 "$MPITRON" train "${common[@]}" --pp 2 --schedule pipedream --batch-size 8
expect_error "the mlp family runs as one pipeline stage: use --pp 1 (got --pp 2)" \
  mpiexec -n 2 "$MPITRON" train --config "$REPO/configs/mlp-fmnist.toml" --data "$data" --steps 2 --pp 2
expect_error "n_head (4) is not divisible by --tp 3" mpiexec -n 3 "$MPITRON" train "${common[@]}" --tp 3 --batch-size 8
expect_error "--tp 8 is larger than n_head (4)" mpiexec -n 2 "$MPITRON" train "${common[@]}" --dp 1 --tp 8 --batch-size 8
# Without --dp, dp is the job's ranks / (tp x pp), which must divide.
expect_error "the job has 4 ranks, which tp 1 x pp 3 does not divide" mpiexec -n 4 "$MPITRON" train "${common[@]}" --pp 3 --batch-size 8
expect_error "the mlp family runs at --tp 1" mpiexec -n 2 "$MPITRON" train --config "$REPO/configs/mlp-fmnist.toml" --data "$data" --steps 2 --tp 2
# A file only rank 0 opens (the trace) is broken: every rank stops with rank 0's message.
mpiexec -n 2 "$MPITRON" train "${common[@]}" --dp 2 --batch-size 8 --out broken >/dev/null
echo "not a trace" >broken/trace.h5
expect_error "trace broken/trace.h5" mpiexec -n 2 "$MPITRON" train "${common[@]}" --dp 2 --batch-size 8 --steps 4 --allow-changes --out broken --resume auto
echo "bad layouts ok"
# A data file that one node lacks (here: rank 1 runs in a folder without it) stops every rank
# with one message naming that rank's host, not a hang.
mkdir -p has_data no_data
cp "$data" has_data/corpus.txt
expect_error "(rank 1), not on every rank: data file 'corpus.txt' does not exist" \
  mpiexec -n 1 -wdir has_data "$MPITRON" train --config "$TINY" --data corpus.txt --steps 2 --seq-len 16 --batch-size 8 --dp 2 : \
  -n 1 -wdir no_data "$MPITRON" train --config "$TINY" --data corpus.txt --steps 2 --seq-len 16 --batch-size 8 --dp 2
