#!/usr/bin/env bash
# Checkpoints are global: a run at dp 4 / ZeRO 1 writes a checkpoint at step 10, which resumes at
# dp 2 / ZeRO 2 and at 1x1x1 with the uninterrupted baseline's losses for steps 11..20.
# Usage: resume_layout.sh MPITRON REPO WORK BASELINE_TRACE [FIRST_RUN]
#   FIRST_RUN: the dp 4 / ZeRO 1 run's folder where another test made it with the baseline's flags
#   (equivalence_dp4_zero1, a CTest fixture: the same run once, not twice); else it is run here.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
baseline=$4
flags=$(cat "$(dirname "$baseline")/flags")
data=$(corpus)
first=${5:-}
if [[ -z $first || ! -e $first/ckpt_10.h5 ]]; then
  # shellcheck disable=SC2086
  mpiexec -n 4 "$MPITRON" train --config "$TINY" --data "$data" $flags --dp 4 --zero 1 --out dp4
  first=dp4
fi
for target in "2 --dp 2 --zero 2" "1 --dp 1 --zero 0"; do
  # shellcheck disable=SC2086  # the target is words
  set -- $target
  ranks=$1
  shift
  dir=resumed_$ranks
  mkdir -p "$dir"
  cp "$first/trace.h5" "$first/ckpt_10.h5" "$dir/"
  # shellcheck disable=SC2086
  mpiexec -n "$ranks" "$MPITRON" train --config "$TINY" --data "$data" $flags "$@" --out "$dir" --resume "$dir/ckpt_10.h5"
  "$MPITRON" compare "$baseline" "$dir/trace.h5" --rtol 1e-5 || fail "resume at $target differs"
  cmp <(trace_column "$baseline" step) <(trace_column "$dir/trace.h5" step) ||
    fail "resumed trace at $target has a gap or a repeated step"
done
echo "resume across layouts ok"
