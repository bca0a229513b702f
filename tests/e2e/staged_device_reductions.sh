#!/usr/bin/env bash
# --device cpu-staged at dp 2 with the reductions staged_device.sh leaves out: buckets, ZeRO 1,
# the ring and gather-scatter; each equal to the CPU's losses bit for bit (staged_device.sh says
# why). Apart so that the sanitizer run can leave these launches out.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)
common=(--config "$TINY" --data "$data" --steps 6 --batch-size 8 --seq-len 32 --log-every 0
  --eval-every 3 --eval-batches 1)
same() {  # same A B WHAT
  "$MPITRON" compare "$1/trace.h5" "$2/trace.h5" --rtol 0 >/dev/null || fail "$3"
}
STAGED_LAYOUTS=("--zero 0 --bucket-mb 0.05" "--zero 1" "--zero 1 --dp-reduce ring"
  "--zero 0 --dp-reduce gather-scatter")
# shellcheck source=tests/e2e/staged_device_layouts.sh
source "$(dirname "$0")/staged_device_layouts.sh"
echo "staged device reductions ok"
