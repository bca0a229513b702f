#!/usr/bin/env bash
# CNN checkpoints are global too, batch-norm running statistics included: a run in one layout
# writes a checkpoint at step 6 that resumes in another with the baseline's losses for steps
# 7..12 (alexnet: tp 2 x pp 2 to tp 2 and to 1x1x1; resnet: pp 4 to dp 2 and to 1x1x1).
# Usage: cnn_resume_layout.sh MPITRON REPO WORK BASELINE_TRACE FAMILY
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
baseline=$4
family=$5
read -ra model <"$(dirname "$baseline")/model"
read -ra flags <"$(dirname "$baseline")/flags"
case $family in
  alexnet) first=(4 --tp 2 --pp 2 --micro-batches 2) targets=("2 --tp 2" "1") ;;
  resnet) first=(4 --pp 4 --micro-batches 8) targets=("2 --dp 2" "1") ;;
  *) fail "unknown family $family" ;;
esac
mpiexec -n "${first[0]}" "$MPITRON" train "${model[@]}" "${flags[@]}" "${first[@]:1}" --out first
for target in "${targets[@]}"; do
  read -ra t <<<"$target"
  dir=resumed_${target// /_}
  mkdir -p "$dir"
  cp first/trace.h5 first/ckpt_6.h5 "$dir/"
  mpiexec -n "${t[0]}" "$MPITRON" train "${model[@]}" "${flags[@]}" "${t[@]:1}" --out "$dir" \
    --resume "$dir/ckpt_6.h5"
  "$MPITRON" compare "$baseline" "$dir/trace.h5" --rtol 1e-5 || fail "resume at $target differs"
done
echo "$family resume across layouts ok"
