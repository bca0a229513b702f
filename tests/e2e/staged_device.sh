#!/usr/bin/env bash
# --device cpu-staged runs the CPU's math with every movement a GPU run makes: the model,
# gradients and moments in "device" memory reached only by uploads and downloads, the initial
# parameters drawn on the host and uploaded, checkpoints and --init-from through host copies, and
# every data-parallel collective on a host copy of its range. Its losses must equal the CPU's bit
# for bit, at dp 1 and dp 2 with every reduction, resumed or not; so a transfer the GPU path
# forgets fails here, on any machine.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)
# Batch 8 x 32 tokens, not the preset's 32 x 64: every comparison is bit for bit, whatever the shape.
common=(--config "$TINY" --data "$data" --steps 6 --batch-size 8 --seq-len 32 --log-every 0
  --eval-every 3 --eval-batches 1)
same() {  # same A B WHAT
  "$MPITRON" compare "$1/trace.h5" "$2/trace.h5" --rtol 0 >/dev/null || fail "$3"
}
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
# ZeRO at dp 1: one shard of everything, nothing to reduce or gather (the same bits as ZeRO 0).
for z in 1 2; do
  "$MPITRON" train "${common[@]}" --device cpu-staged --zero "$z" --out "dp1_zero$z" >/dev/null
  same cpu "dp1_zero$z" "cpu-staged with --zero $z at dp 1 differs from the cpu"
done
# dp 2: plain all-reduce and ZeRO 2's reduce-scatter here; the other reductions in
# staged_device_reductions (staged_device_reductions.sh, left out of the sanitizer run).
STAGED_LAYOUTS=("--zero 0" "--zero 2")
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
# Tensor parallelism at tp 2: every region's all-reduce (the non-blocking input gradients too),
# the vocab-parallel embedding's sum and the cross-entropy's row statistics through host copies,
# the shard pieces (row-parallel bias, the embedding's shard, the cross-entropy's steps) through
# the layer table. BERT, AlexNet and tp x pp in staged_device_reductions.sh.
mpiexec -n 2 "$MPITRON" train "${common[@]}" --tp 2 --out tp_cpu >/dev/null
mpiexec -n 2 "$MPITRON" train "${common[@]}" --tp 2 --device cpu-staged --out tp_staged >/dev/null
same tp_cpu tp_staged "cpu-staged at tp 2 differs from the cpu"
# Pipeline stages: every boundary message downloaded into a host buffer before its send and
# uploaded from one after its receive (MPI never sees the model's memory; a missing upload leaves
# the stage's input unset and fails here), the tied embedding's sum over the first and last
# stage through the host; 1F1B at pp 2, and the interleaved schedule at dp 2 x pp 2.
pipeline=(--pp 2 --micro-batches 4)
mpiexec -n 2 "$MPITRON" train "${common[@]}" "${pipeline[@]}" --out pp_cpu >/dev/null
mpiexec -n 2 "$MPITRON" train "${common[@]}" "${pipeline[@]}" --device cpu-staged --out pp_staged \
  >/dev/null
same pp_cpu pp_staged "cpu-staged at pp 2 differs from the cpu"
interleaved=(--dp 2 --pp 2 --micro-batches 4 --schedule interleaved --virtual-stages 2)
mpiexec -n 4 "$MPITRON" train "${common[@]}" "${interleaved[@]}" --out interleaved_cpu >/dev/null
mpiexec -n 4 "$MPITRON" train "${common[@]}" "${interleaved[@]}" --device cpu-staged \
  --out interleaved_staged >/dev/null
same interleaved_cpu interleaved_staged "cpu-staged at dp 2 x pp 2 (interleaved) differs"
# The BERT encoder on the same layer table: the integers it derives from its rows (ids, token
# types, padding lengths, masked rows) uploaded, its masked-LM rows gathered and scattered back on
# the device, the classifier's first tokens by strided copies; the masked LM and the testament
# classifier (padding masks, validation accuracy) equal to the CPU's bits, the classifier at dp 2
# too.
# bert_staged TASK ARGS...: the CPU and cpu-staged bit for bit.
bert_staged() {
  local task=$1
  shift
  "$MPITRON" train "$@" --out "bert_${task}_cpu" >/dev/null
  "$MPITRON" train "$@" --device cpu-staged --out "bert_${task}_staged" >/dev/null
  same "bert_${task}_cpu" "bert_${task}_staged" "bert ($task) on cpu-staged differs from the cpu"
}
bert_staged mlm --config "$REPO/configs/bert-mlm.toml" --data "$data" --steps 6 --batch-size 8 \
  --seq-len 32 --log-every 0 --eval-every 3 --eval-batches 1
testament=(--config "$REPO/configs/bert-testament.toml" --data "$(verses)" --steps 6 --batch-size 8
  --log-every 0 --eval-every 3 --eval-batches 1)
bert_staged testament "${testament[@]}"
# dp 2 with ZeRO 2 (the shards' uploads and downloads), ranks started by the test.
mpiexec -n 2 "$MPITRON" train "${testament[@]}" --dp 2 --zero 2 --out bert_testament_cpu_dp2 >/dev/null
mpiexec -n 2 "$MPITRON" train "${testament[@]}" --dp 2 --zero 2 --device cpu-staged \
  --out bert_testament_staged_dp2 >/dev/null
same bert_testament_cpu_dp2 bert_testament_staged_dp2 "bert (testament) on cpu-staged at dp 2 differs"
cmp <(trace_column bert_testament_cpu/trace.h5 val_accuracy) \
  <(trace_column bert_testament_staged/trace.h5 val_accuracy) ||
  fail "bert's validation accuracy on cpu-staged differs from the cpu's"

# The MLP on the same layer table: its samples uploaded per micro-batch, its logits downloaded for
# the validation accuracy; dp 1 and dp 2 (ZeRO 2) equal to the CPU's bits. Then the CNNs.
fmnist=/usr/share/datasets/fashion-mnist
if [[ -e $fmnist/train-images-idx3-ubyte.gz ]]; then
  mlp=(--config "$REPO/configs/mlp-fmnist.toml" --steps 12 --log-every 0 --eval-every 6
    --eval-batches 2)
  "$MPITRON" train "${mlp[@]}" --out mlp_cpu >/dev/null
  "$MPITRON" train "${mlp[@]}" --device cpu-staged --out mlp_staged >/dev/null
  same mlp_cpu mlp_staged "the mlp on cpu-staged differs from the cpu"
  for column in val_loss val_accuracy; do
    cmp <(trace_column mlp_cpu/trace.h5 $column) <(trace_column mlp_staged/trace.h5 $column) ||
      fail "the mlp on cpu-staged differs from the cpu in $column"
  done
  mpiexec -n 2 "$MPITRON" train "${mlp[@]}" --dp 2 --zero 2 --out mlp_cpu_dp2 >/dev/null
  mpiexec -n 2 "$MPITRON" train "${mlp[@]}" --dp 2 --zero 2 --device cpu-staged \
    --out mlp_staged_dp2 >/dev/null
  same mlp_cpu_dp2 mlp_staged_dp2 "the mlp on cpu-staged at dp 2 (ZeRO 2) differs"
  # AlexNet and ResNet on the same table: images and labels uploaded per micro-batch (one copy
  # per slot: backward reads them), batch norm's statistics summed on the device and brought to the
  # host at the end of a step, the running statistics downloaded, updated and uploaded (the
  # evaluations read them); dp 1, and dp 2 with ZeRO 2 for ResNet (its shortcuts' sums).
  for fam in alexnet resnet; do
    cnn=(--config "$REPO/configs/$fam-fmnist.toml" --steps 8 --batch-size 16 --log-every 0
      --eval-every 4 --eval-batches 2)
    [[ $fam == resnet ]] && cnn+=(--set model.blocks_per_stage=1)
    "$MPITRON" train "${cnn[@]}" --out "${fam}_cpu" >/dev/null
    "$MPITRON" train "${cnn[@]}" --device cpu-staged --out "${fam}_staged" >/dev/null
    same "${fam}_cpu" "${fam}_staged" "$fam on cpu-staged differs from the cpu"
    for column in val_loss val_accuracy; do
      cmp <(trace_column "${fam}_cpu/trace.h5" $column) \
        <(trace_column "${fam}_staged/trace.h5" $column) ||
        fail "$fam on cpu-staged differs from the cpu in $column"
    done
  done
  mpiexec -n 2 "$MPITRON" train "${cnn[@]}" --dp 2 --zero 2 --out resnet_cpu_dp2 >/dev/null
  mpiexec -n 2 "$MPITRON" train "${cnn[@]}" --dp 2 --zero 2 --device cpu-staged \
    --out resnet_staged_dp2 >/dev/null
  same resnet_cpu_dp2 resnet_staged_dp2 "resnet on cpu-staged at dp 2 (ZeRO 2) differs"
  # ResNet's blocks over 3 pipeline stages (its boundary messages through the host).
  mpiexec -n 3 "$MPITRON" train "${cnn[@]}" --pp 3 --micro-batches 2 --out resnet_cpu_pp3 >/dev/null
  mpiexec -n 3 "$MPITRON" train "${cnn[@]}" --pp 3 --micro-batches 2 --device cpu-staged \
    --out resnet_staged_pp3 >/dev/null
  same resnet_cpu_pp3 resnet_staged_pp3 "resnet on cpu-staged at pp 3 differs"
else
  echo "note: $fmnist is missing (apt-get install dataset-fashion-mnist): the mlp and cnn parts did not run"
fi
echo "staged device ok"
