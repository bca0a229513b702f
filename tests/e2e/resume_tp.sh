#!/usr/bin/env bash
# Checkpoints stay global under tensor parallelism: a tp 2 run writes a checkpoint at step 10,
# which resumes at tp 4, at 1x1x1 and at dp 2 x tp 2 with the uninterrupted baseline's losses
# for steps 11..20.
# Usage: resume_tp.sh MPITRON REPO WORK BASELINE_TRACE [FIRST_RUN]
#   FIRST_RUN: the tp 2 run's folder where another test made it with the baseline's flags
#   (equivalence_tp2, a CTest fixture: the same run once, not twice); else it is run here.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
baseline=$4
flags=$(cat "$(dirname "$baseline")/flags")
data=$(corpus)
first=${5:-}
if [[ -z $first || ! -e $first/ckpt_10.h5 ]]; then
  # shellcheck disable=SC2086
  mpiexec -n 2 "$MPITRON" train --config "$TINY" --data "$data" $flags --tp 2 --out tp2
  first=tp2
fi
for target in "4 --tp 4" "1 --tp 1" "4 --dp 2 --tp 2 --zero 1"; do
  # shellcheck disable=SC2086  # the target is words
  set -- $target
  ranks=$1
  shift
  dir=resumed_$(echo "$*" | tr -d ' -')
  mkdir -p "$dir"
  cp "$first/trace.h5" "$first/ckpt_10.h5" "$dir/"
  # shellcheck disable=SC2086
  mpiexec -n "$ranks" "$MPITRON" train --config "$TINY" --data "$data" $flags "$@" --out "$dir" \
    --resume "$dir/ckpt_10.h5"
  "$MPITRON" compare "$baseline" "$dir/trace.h5" --rtol 1e-5 || fail "resume at $target differs"
  cmp <(trace_column "$baseline" step) <(trace_column "$dir/trace.h5" step) ||
    fail "resumed trace at $target has a gap or a repeated step"
done
echo "resume across tp layouts ok"
