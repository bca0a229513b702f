#!/usr/bin/env bash
# --device cpu-staged runs the CPU's math with every movement a GPU run makes: the model,
# gradients and moments in "device" memory reached only by uploads and downloads, the initial
# parameters drawn on the host and uploaded, checkpoints and --init-from through host copies, and
# every collective on a host copy of its range. Its losses must equal the CPU's bit for bit; so a
# transfer the GPU path forgets fails here, on any machine. Each staging path once (this test also
# runs under the sanitizers); staged_device_matrix.sh runs the other layouts and families.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)
# Batch 8 x 32 tokens, not the preset's 32 x 64: every comparison is bit for bit, whatever the shape.
common=(--config "$TINY" --data "$data" --steps 6 --batch-size 8 --seq-len 32 --log-every 0
  --eval-every 3 --eval-batches 1)
"$MPITRON" train "${common[@]}" --out cpu >/dev/null
"$MPITRON" train "${common[@]}" --device cpu-staged --out staged >/dev/null
same cpu staged "cpu-staged differs from the cpu at one rank"
# Steps 4-6 again from the step-3 checkpoint (the trace keeps steps 1-3 and is continued).
"$MPITRON" train "${common[@]}" --device cpu-staged --ckpt-every 3 --out resumed >/dev/null
rm resumed/ckpt_6.h5
"$MPITRON" train "${common[@]}" --device cpu-staged --resume auto --out resumed >/dev/null
same cpu resumed "a resumed cpu-staged run differs (checkpoint through host copies)"
"$MPITRON" train "${common[@]}" --device cpu-staged --recompute block --out recompute >/dev/null
same cpu recompute "cpu-staged with --recompute block differs"
"$MPITRON" train "${common[@]}" --device cpu-staged --steps 0 --out init >/dev/null
"$MPITRON" train "${common[@]}" --device cpu-staged --init-from init/ckpt_0.h5 --out from_init \
  >/dev/null
same cpu from_init "--init-from through host copies changed the parameters"
# dp 2 with ZeRO 2's reduce-scatter of shards through host copies; the other reductions in
# staged_device_matrix.sh.
STAGED_LAYOUTS=("--zero 2")
# shellcheck source=tests/e2e/staged_device_layouts.sh
source "$(dirname "$0")/staged_device_layouts.sh"
# --offload optimizer with 8-bit AdamW: the codes in host memory, their update on the host's cores
# through host copies of the gradient and parameter shard, checkpoints and resume through the host
# state: the CPU's 8-bit bits (the rest of the offload checks: offload.sh).
"$MPITRON" train "${common[@]}" --optimizer adamw8bit --out cpu_8bit >/dev/null
"$MPITRON" train "${common[@]}" --device cpu-staged --optimizer adamw8bit --offload optimizer \
  --ckpt-every 3 --out staged_8bit_offload >/dev/null
same cpu_8bit staged_8bit_offload "8-bit AdamW offloaded from cpu-staged differs from the cpu's"
rm staged_8bit_offload/ckpt_6.h5
"$MPITRON" train "${common[@]}" --device cpu-staged --optimizer adamw8bit --offload optimizer \
  --resume auto --out staged_8bit_offload >/dev/null
same cpu_8bit staged_8bit_offload "a resumed cpu-staged 8-bit offloaded run differs"
# The master weights in host memory (--offload optimizer,master, bf16): the 16-bit copy rounded on
# the host and uploaded, checkpoints where the weights are; the CPU's bf16 bits (the rest:
# offload.sh).
"$MPITRON" train "${common[@]}" --precision bf16 --out cpu_bf16 >/dev/null
"$MPITRON" train "${common[@]}" --precision bf16 --device cpu-staged --offload optimizer,master \
  --out staged_master >/dev/null
same cpu_bf16 staged_master "cpu-staged with the master weights in host memory differs"
# 8-bit AdamW on the device (the state in the device's memory, the update the device's, the codes
# zeroed by its fill, checkpoints through the state's host copies): the CPU's 8-bit bits, resumed.
"$MPITRON" train "${common[@]}" --device cpu-staged --optimizer adamw8bit --ckpt-every 3 \
  --out staged_8bit >/dev/null
same cpu_8bit staged_8bit "8-bit AdamW on cpu-staged's device differs from the cpu's"
rm staged_8bit/ckpt_6.h5
"$MPITRON" train "${common[@]}" --device cpu-staged --optimizer adamw8bit --resume auto \
  --out staged_8bit >/dev/null
same cpu_8bit staged_8bit "a resumed 8-bit run on cpu-staged's device differs"
# Tensor parallelism at tp 2: every region's all-reduce (the non-blocking input gradients too),
# the vocab-parallel embedding's sum and the cross-entropy's row statistics through host copies,
# the shard pieces (row-parallel bias, the embedding's shard, the cross-entropy's steps) through
# the layer table.
mpiexec -n 2 "$MPITRON" train "${common[@]}" --tp 2 --out tp_cpu >/dev/null
mpiexec -n 2 "$MPITRON" train "${common[@]}" --tp 2 --device cpu-staged --out tp_staged >/dev/null
same tp_cpu tp_staged "cpu-staged at tp 2 differs from the cpu"
# Pipeline stages: every boundary message downloaded into a host buffer before its send and
# uploaded from one after its receive (MPI never sees the model's memory; a missing upload leaves
# the stage's input unset and fails here), the tied embedding's sum over the first and last
# stage through the host; GPipe at pp 2 with the blocks recomputed (one shared set of block
# activations for the four micro-batches in flight).
pipeline=(--pp 2 --micro-batches 4 --schedule gpipe --recompute block)
mpiexec -n 2 "$MPITRON" train "${common[@]}" "${pipeline[@]}" --out pp_cpu >/dev/null
mpiexec -n 2 "$MPITRON" train "${common[@]}" "${pipeline[@]}" --device cpu-staged --out pp_staged \
  >/dev/null
same pp_cpu pp_staged "cpu-staged at pp 2 (GPipe, recompute) differs from the cpu"
# The BERT encoder on the same layer table: the integers it derives from its rows (ids, token
# types, padding lengths, masked rows) uploaded, its masked-LM rows gathered and scattered back on
# the device; equal to the CPU's bits.
bert=(--config "$REPO/configs/bert-mlm.toml" --data "$data" --steps 6 --batch-size 8 --seq-len 32
  --log-every 0 --eval-every 3 --eval-batches 1)
"$MPITRON" train "${bert[@]}" --out bert_cpu >/dev/null
"$MPITRON" train "${bert[@]}" --device cpu-staged --out bert_staged >/dev/null
same bert_cpu bert_staged "bert (masked LM) on cpu-staged differs from the cpu"
# The MLP (its samples uploaded per micro-batch, its logits downloaded for the validation accuracy)
# and ResNet (images and labels uploaded per slot, batch norm's statistics summed on the device and
# brought to the host at the end of a step, the running statistics downloaded, updated and
# uploaded for the evaluations): equal to the CPU's bits, validation columns too.
# staged_family NAME ARGS...: the CPU and cpu-staged, losses and validation columns bit for bit.
staged_family() {
  local fam=$1 column
  shift
  "$MPITRON" train "$@" --out "${fam}_cpu" >/dev/null
  "$MPITRON" train "$@" --device cpu-staged --out "${fam}_staged" >/dev/null
  same "${fam}_cpu" "${fam}_staged" "$fam on cpu-staged differs from the cpu"
  for column in val_loss val_accuracy; do
    if ! cmp <(trace_column "${fam}_cpu/trace.h5" $column) \
      <(trace_column "${fam}_staged/trace.h5" $column); then
      fail "$fam on cpu-staged differs from the cpu in $column"
    fi
  done
}
fmnist=/usr/share/datasets/fashion-mnist
if [[ -e $fmnist/train-images-idx3-ubyte.gz ]]; then
  staged_family mlp --config "$REPO/configs/mlp-fmnist.toml" --steps 12 --log-every 0 \
    --eval-every 6 --eval-batches 2
  staged_family resnet --config "$REPO/configs/resnet-fmnist.toml" --steps 8 --batch-size 16 \
    --log-every 0 --eval-every 4 --eval-batches 2 --set model.blocks_per_stage=1
else
  echo "note: $fmnist is missing (apt-get install dataset-fashion-mnist): the mlp and resnet parts did not run"
fi
echo "staged device ok"
