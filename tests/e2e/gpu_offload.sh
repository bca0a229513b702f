#!/usr/bin/env bash
# --offload optimizer (and master) on --device cuda through pinned staging, and 8-bit AdamW on the
# GPU against the host's. Skipped, saying why, without a CUDA build or GPU.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
require_gpu
data=$(corpus)
# Through the staging queue's pinned halves, on a model wide enough (5.4M parameters; heads of 64,
# which the GPU's attention takes) that the update and the 16-bit copy's upload take several
# chunks, each pair bit for bit: the host's fp32 update and the GPU's (the kernel is the CPU's
# arithmetic, every operation correctly rounded); the master weights in host memory and
# --offload optimizer (both update on the host, and the copy rounds to nearest even on the host
# as on the GPU); 8-bit AdamW on the GPU and on the host.
wide=(--config "$TINY" --data "$data" --steps 6 --batch-size 8 --seq-len 32 --log-every 3
  --eval-every 3 --eval-batches 1 --set model.n_embd=384 --set model.n_head=6 --set model.n_layer=3
  --device cuda)
"$MPITRON" train "${wide[@]}" --out wide_gpu >/dev/null
"$MPITRON" train "${wide[@]}" --offload optimizer --out wide_gpu_offload >/dev/null
same wide_gpu wide_gpu_offload "--offload optimizer on the GPU differs from the GPU's own update"
"$MPITRON" train "${wide[@]}" --precision bf16 --offload optimizer --out wide_bf16_offload \
  >/dev/null
"$MPITRON" train "${wide[@]}" --precision bf16 --offload optimizer,master --out wide_bf16_master \
  >/dev/null
same wide_bf16_offload wide_bf16_master "--offload optimizer,master on the GPU differs"
"$MPITRON" train "${wide[@]}" --precision bf16 --optimizer adamw8bit --out wide_8bit >/dev/null
"$MPITRON" train "${wide[@]}" --precision bf16 --optimizer adamw8bit --offload optimizer \
  --out wide_8bit_offload >/dev/null
same wide_8bit wide_8bit_offload "8-bit AdamW on the GPU differs from the host's"
echo "gpu offload ok"
