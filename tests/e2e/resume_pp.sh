#!/usr/bin/env bash
# Checkpoints stay global under pipeline parallelism: a pp 2 run writes a checkpoint at step 10,
# which resumes at pp 4 (GPipe), at 1x1x1 and at dp 2 x tp 2 x pp 2 (ZeRO 1); and the 1x1x1
# baseline's own checkpoint at step 10 resumes at pp 2 with unbalanced stages and at dp 2 x tp 2 x
# pp 2 (ZeRO 1, GPipe). Each continues with the uninterrupted baseline's losses for steps 11..20.
# Usage: resume_pp.sh MPITRON REPO WORK BASELINE_TRACE [FIRST_RUN]
#   FIRST_RUN: the pp 2 (1F1B, 4 micro-batches) run's folder where another test made it with the
#   baseline's flags (equivalence_pp2_1f1b_m4, a CTest fixture: the same run once, not twice); else
#   it is run here.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
baseline=$4
flags=$(cat "$(dirname "$baseline")/flags")
data=$(corpus)
pp2=${5:-}
if [[ -z $pp2 || ! -e $pp2/ckpt_10.h5 ]]; then
  # shellcheck disable=SC2086
  mpiexec -n 2 "$MPITRON" train --config "$TINY" --data "$data" $flags --pp 2 --micro-batches 4 --out pp2
  pp2=pp2
fi
# resume FROM RANKS FLAGS...: copies FROM's trace and step-10 checkpoint into a fresh folder and
# finishes the run there in the given layout.
resume() {
  local from=$1 ranks=$2
  shift 2
  local dir
  dir=resumed_$(basename "$from")_to_$(echo "$*" | tr -d ' -' | tr ',' '_')
  mkdir -p "$dir"
  cp "$from/trace.h5" "$from/ckpt_10.h5" "$dir/"
  # shellcheck disable=SC2086
  mpiexec -n "$ranks" "$MPITRON" train --config "$TINY" --data "$data" $flags "$@" --out "$dir" \
    --resume "$dir/ckpt_10.h5"
  "$MPITRON" compare "$baseline" "$dir/trace.h5" --rtol 1e-5 ||
    fail "resume of $from's checkpoint at $* differs"
  cmp <(trace_column "$baseline" step) <(trace_column "$dir/trace.h5" step) ||
    fail "resumed trace of $from at $* has a gap or a repeated step"
}
resume "$pp2" 4 --pp 4 --schedule gpipe --micro-batches 2
resume "$pp2" 1 --pp 1
resume "$pp2" 8 --dp 2 --tp 2 --pp 2 --zero 1 --micro-batches 2
resume "$(dirname "$baseline")" 2 --pp 2 --stage-layers 3,1 --micro-batches 8
resume "$(dirname "$baseline")" 8 --dp 2 --tp 2 --pp 2 --zero 1 --schedule gpipe --micro-batches 2
echo "resume across pp layouts ok"
