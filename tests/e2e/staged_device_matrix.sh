#!/usr/bin/env bash
# --device cpu-staged against the CPU, bit for bit (staged_device.sh says why), at the layouts and
# families staged_device.sh leaves out: ZeRO 1 and 2 at dp 1, every dp-2 reduction (ZeRO 0, buckets,
# ZeRO 1, the ring, gather-scatter), the interleaved schedule at dp 2 x pp 2, tp 2 x pp 2; the
# BERT classifier (padding masks, validation accuracy) at dp 1, dp 2 and the masked LM at tp 2;
# the MLP at dp 2; AlexNet at dp 1 and tp 2; ResNet at dp 2 and over 3 pipeline stages; and in 16
# bits (the CPU's bf16/fp16 layers under a device's paths: images and weight copies rounded on the
# device, 16-bit messages and all-reduces staged through the host) the GPT at tp 2 x pp 2 and with
# ZeRO 1 at dp 2, BERT's masked LM at tp 2, the MLP, AlexNet at tp 2 and ResNet over 2 stages;
# and those 16-bit layouts but the GPT's dp 2 again with the fp32 master weights in host memory
# (--offload optimizer,master: the 16-bit copy rounded on the host and uploaded).
# Apart so that the sanitizer run can leave these launches out (staged_device.sh runs each staging
# path under it once).
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)
common=(--config "$TINY" --data "$data" --steps 6 --batch-size 8 --seq-len 32 --log-every 0
  --eval-every 3 --eval-batches 1)
# staged NAME RANKS ARGS...: the CPU and cpu-staged at a layout, bit for bit.
staged() {
  local name=$1 ranks=$2
  shift 2
  mpiexec -n "$ranks" "$MPITRON" train "$@" --out "${name}_cpu" >/dev/null
  mpiexec -n "$ranks" "$MPITRON" train "$@" --device cpu-staged --out "${name}_staged" >/dev/null
  same "${name}_cpu" "${name}_staged" "cpu-staged ($name) differs from the cpu"
}
# staged_master NAME RANKS ARGS...: cpu-staged with the master weights in host memory against the
# CPU's run that `staged NAME` made, bit for bit.
staged_master() {
  local name=$1 ranks=$2
  shift 2
  mpiexec -n "$ranks" "$MPITRON" train "$@" --device cpu-staged --offload optimizer,master \
    --out "${name}_master" >/dev/null
  same "${name}_cpu" "${name}_master" "cpu-staged --offload optimizer,master ($name) differs"
}
# ZeRO at dp 1: one shard of everything, nothing to reduce or gather (the same bits as ZeRO 0).
"$MPITRON" train "${common[@]}" --out cpu >/dev/null
for z in 1 2; do
  "$MPITRON" train "${common[@]}" --device cpu-staged --zero "$z" --out "dp1_zero$z" >/dev/null
  same cpu "dp1_zero$z" "cpu-staged with --zero $z at dp 1 differs from the cpu"
done
STAGED_LAYOUTS=("--zero 0" "--zero 0 --bucket-mb 0.05" "--zero 1" "--zero 1 --dp-reduce ring"
  "--zero 0 --dp-reduce gather-scatter")
# shellcheck source=tests/e2e/staged_device_layouts.sh
source "$(dirname "$0")/staged_device_layouts.sh"
staged interleaved 4 "${common[@]}" --dp 2 --pp 2 --micro-batches 4 --schedule interleaved \
  --virtual-stages 2
staged gpt_tp2_pp2 4 "${common[@]}" --tp 2 --pp 2 --micro-batches 2
staged gpt_bf16_tp2_pp2 4 "${common[@]}" --precision bf16 --tp 2 --pp 2 --micro-batches 2
staged_master gpt_bf16_tp2_pp2 4 "${common[@]}" --precision bf16 --tp 2 --pp 2 --micro-batches 2
staged gpt_fp16_dp2_zero1 2 "${common[@]}" --precision fp16 --dp 2 --zero 1
testament=(--config "$REPO/configs/bert-testament.toml" --data "$(verses)" --steps 6 --batch-size 8
  --log-every 0 --eval-every 3 --eval-batches 1)
staged bert_testament 1 "${testament[@]}"
cmp <(trace_column bert_testament_cpu/trace.h5 val_accuracy) \
  <(trace_column bert_testament_staged/trace.h5 val_accuracy) ||
  fail "bert's validation accuracy on cpu-staged differs from the cpu's"
staged bert_testament_dp2 2 "${testament[@]}" --dp 2 --zero 2
bert_mlm=(--config "$REPO/configs/bert-mlm.toml" --data "$data" --steps 4 --batch-size 8 --seq-len 32
  --log-every 0 --eval-every 2 --eval-batches 1 --tp 2)
staged bert_mlm_tp2 2 "${bert_mlm[@]}"
staged bert_mlm_bf16_tp2 2 "${bert_mlm[@]}" --precision bf16
staged_master bert_mlm_bf16_tp2 2 "${bert_mlm[@]}" --precision bf16
fmnist=/usr/share/datasets/fashion-mnist
if [[ -e $fmnist/train-images-idx3-ubyte.gz ]]; then
  staged mlp_dp2 2 --config "$REPO/configs/mlp-fmnist.toml" --steps 12 --log-every 0 \
    --eval-every 6 --eval-batches 2 --dp 2 --zero 2
  alexnet=(--config "$REPO/configs/alexnet-fmnist.toml" --steps 4 --batch-size 16 --log-every 0
    --eval-every 2 --eval-batches 1)
  staged alexnet 1 "${alexnet[@]}"
  staged alexnet_tp2 2 "${alexnet[@]}" --tp 2
  resnet=(--config "$REPO/configs/resnet-fmnist.toml" --steps 8 --batch-size 16 --log-every 0
    --eval-every 4 --eval-batches 2 --set model.blocks_per_stage=1)
  staged resnet_dp2 2 "${resnet[@]}" --dp 2 --zero 2
  staged resnet_pp3 3 "${resnet[@]}" --pp 3 --micro-batches 2
  staged mlp_fp16 1 --config "$REPO/configs/mlp-fmnist.toml" --steps 6 --log-every 0 \
    --eval-every 3 --eval-batches 2 --precision fp16
  staged alexnet_bf16_tp2 2 "${alexnet[@]}" --precision bf16 --tp 2
  staged resnet_fp16_pp2 2 "${resnet[@]}" --precision fp16 --pp 2 --micro-batches 2
  staged_master mlp_fp16 1 --config "$REPO/configs/mlp-fmnist.toml" --steps 6 --log-every 0 \
    --eval-every 3 --eval-batches 2 --precision fp16
  staged_master alexnet_bf16_tp2 2 "${alexnet[@]}" --precision bf16 --tp 2
  staged_master resnet_fp16_pp2 2 "${resnet[@]}" --precision fp16 --pp 2 --micro-batches 2
else
  echo "note: $fmnist is missing (apt-get install dataset-fashion-mnist): the mlp and cnn parts did not run"
fi
echo "staged device matrix ok"
