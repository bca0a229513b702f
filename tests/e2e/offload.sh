#!/usr/bin/env bash
# --offload optimizer: the optimizer state in host memory and its update on the host's cores (off
# the CPU through host copies of the gradient and parameter shard). The same arithmetic, so the
# same bits as without it: on the cpu, on cpu-staged (every transfer a GPU run makes) resumed from
# a checkpoint, and at dp 2 with ZeRO 2; and the device's peak falls by exactly the moments' bytes.
# --offload optimizer,master (bf16): the fp32 master weights in host memory too, the device holding
# only the layers' 16-bit copy, rounded on the host in chunks and uploaded after each update: the
# CPU's bf16 bits on cpu-staged, resumed, from --init-from, and at dp 2 with ZeRO 1 and 8-bit
# AdamW (the all-gather on the host); the device's peak lower by exactly the master weights'
# bytes, and the plan's.
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

# Wide enough (5.4M parameters) that the update and the 16-bit copy's upload take several staging
# chunks, in two alternating halves (on cpu-staged a staged copy runs only when waited for, so a
# missing wait changes the bits here).
wide=("${common[@]}" --steps 4 --eval-every 2 --precision bf16 --set model.n_embd=384
  --set model.n_layer=3)
"$MPITRON" train "${wide[@]}" --out wide_cpu >/dev/null
"$MPITRON" train "${wide[@]}" --device cpu-staged --offload optimizer --out wide_offload >/dev/null
"$MPITRON" train "${wide[@]}" --device cpu-staged --offload optimizer,master --ckpt-every 2 \
  --out wide_master >master.log
same wide_cpu wide_offload "cpu-staged bf16 with --offload optimizer differs from the cpu"
same wide_cpu wide_master "cpu-staged bf16 with --offload optimizer,master differs from the cpu"
saved=$(($(peak wide_offload) - $(peak wide_master)))
param_bytes=$(trace_column wide_cpu/trace.h5 param_bytes | tail -1 | cut -d. -f1)
((param_bytes > 4194304 * 4)) || fail "the wide model fits one staging chunk"
[[ $saved == "$param_bytes" ]] ||
  fail "--offload optimizer,master took $saved bytes off the device, not the master's $param_bytes"
grep -q "memory plan: every rank's measured peak within 0.00% of the plan" master.log ||
  fail "--offload optimizer,master: the peak is not the plan: $(grep 'memory plan' master.log)"
echo "--offload optimizer,master: the device's peak $saved bytes lower (the fp32 master weights)"
rm wide_master/ckpt_4.h5
"$MPITRON" train "${wide[@]}" --device cpu-staged --offload optimizer,master --resume auto \
  --out wide_master >/dev/null
same wide_cpu wide_master "a resumed cpu-staged --offload optimizer,master run differs"
mpiexec -n 2 "$MPITRON" train "${wide[@]}" --dp 2 --zero 1 --optimizer adamw8bit --out wide_zero1 \
  >/dev/null
mpiexec -n 2 "$MPITRON" train "${wide[@]}" --dp 2 --zero 1 --optimizer adamw8bit \
  --device cpu-staged --offload optimizer,master --out wide_zero1_master >/dev/null
same wide_zero1 wide_zero1_master \
  "cpu-staged dp 2 --zero 1 8-bit AdamW with --offload optimizer,master differs"
# --init-from writes the master weights where they live (host memory) and rounds the copy up.
"$MPITRON" train "${common[@]}" --precision bf16 --steps 3 --out bf16_source >/dev/null
from=(--precision bf16 --init-from bf16_source/ckpt_3.h5)
"$MPITRON" train "${common[@]}" "${from[@]}" --out from_cpu >/dev/null
"$MPITRON" train "${common[@]}" "${from[@]}" --device cpu-staged --offload optimizer,master \
  --out from_master >/dev/null
same from_cpu from_master "--init-from with --offload optimizer,master differs from the cpu's"
expect_error "--offload optimizer,master keeps the fp32 master weights in host memory" \
  "$MPITRON" train "${common[@]}" --device cpu-staged --offload optimizer,master --out bad_master

echo "offload ok"
