#!/usr/bin/env bash
# One cell of the equivalence matrix: train with `mpiexec -n RANKS` and the given layout flags,
# then `mpitron compare` the trace against the 1x1x1 baseline at 1e-5 relative on every step.
# Usage: layout.sh MPITRON REPO WORK BASELINE_TRACE RANKS [train flags...]
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
baseline=$4
ranks=$5
shift 5
[[ -e $baseline ]] || fail "baseline trace $baseline is missing (run the equivalence_baseline test)"
# The baseline's model and data: WORK/model where it wrote one, else gpt-tiny on the corpus.
if [[ -e $(dirname "$baseline")/model ]]; then
  read -ra model <"$(dirname "$baseline")/model"
else
  model=(--config "$TINY" --data "$(corpus)")
fi
# shellcheck disable=SC2046  # the flags are words
mpiexec -n "$ranks" "$MPITRON" train "${model[@]}" $(cat "$(dirname "$baseline")/flags") --out run "$@" |
  tee train.log
"$MPITRON" compare "$baseline" run/trace.h5 --rtol 1e-5
check_memory_plan train.log
