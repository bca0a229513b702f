#!/usr/bin/env bash
# --offload optimizer: the optimizer state in host memory and its update on the host's cores (off
# the CPU through host copies of the gradient and parameter shard). The same arithmetic, so the
# same bits as without it: on the cpu, on cpu-staged (every transfer a GPU run makes) resumed from
# a checkpoint, and at dp 2 with ZeRO 2; and the device's peak falls by exactly the moments' bytes.
# (8-bit AdamW offloaded and resumed: staged_device.sh, which also runs under the sanitizers.)
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)
common=(--config "$TINY" --data "$data" --steps 6 --batch-size 8 --seq-len 32 --log-every 0
  --eval-every 3 --eval-batches 1)
"$MPITRON" train "${common[@]}" --out cpu >/dev/null
"$MPITRON" train "${common[@]}" --offload optimizer --out cpu_offload >/dev/null
same cpu cpu_offload "--offload optimizer on the cpu differs"
peak() { trace_column "$1/trace.h5" peak_mem_bytes | tail -1 | cut -d. -f1; }
saved=$(($(peak cpu) - $(peak cpu_offload)))
param_bytes=$(trace_column cpu/trace.h5 param_bytes | tail -1 | cut -d. -f1)
[[ $saved == $((2 * param_bytes)) ]] ||
  fail "--offload optimizer took $saved bytes off the device, not the moments' $((2 * param_bytes))"
echo "--offload optimizer: the device's peak $saved bytes lower (the two fp32 moments)"

"$MPITRON" train "${common[@]}" --device cpu-staged --offload optimizer --ckpt-every 3 \
  --out staged_offload >/dev/null
same cpu staged_offload "cpu-staged with --offload optimizer differs from the cpu"
rm staged_offload/ckpt_6.h5
"$MPITRON" train "${common[@]}" --device cpu-staged --offload optimizer --resume auto \
  --out staged_offload >/dev/null
same cpu staged_offload "a resumed cpu-staged --offload optimizer run differs"

mpiexec -n 2 "$MPITRON" train "${common[@]}" --dp 2 --zero 2 --out cpu_zero2 >/dev/null
mpiexec -n 2 "$MPITRON" train "${common[@]}" --dp 2 --zero 2 --device cpu-staged \
  --offload optimizer --out staged_zero2_offload >/dev/null
same cpu_zero2 staged_zero2_offload "cpu-staged dp 2 --zero 2 --offload optimizer differs"

expect_error "--optimizer adamw8bit updates on the host: on --device cpu-staged add --offload" \
  "$MPITRON" train "${common[@]}" --device cpu-staged --optimizer adamw8bit --out bad_8bit
echo "offload ok"
