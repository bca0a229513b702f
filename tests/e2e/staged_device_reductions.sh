#!/usr/bin/env bash
# --device cpu-staged at dp 2 with the reductions staged_device.sh leaves out: buckets, ZeRO 1,
# the ring and gather-scatter; then tensor parallelism beyond the GPT at tp 2: tp 2 x pp 2, the
# BERT encoder and AlexNet at tp 2. Each equal to the CPU's losses bit for bit (staged_device.sh
# says why). Apart so that the sanitizer run can leave these launches out.
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
# staged_tp NAME RANKS ARGS...: the CPU and cpu-staged at a TP layout, bit for bit.
staged_tp() {
  local name=$1 ranks=$2
  shift 2
  mpiexec -n "$ranks" "$MPITRON" train "$@" --out "${name}_cpu" >/dev/null
  mpiexec -n "$ranks" "$MPITRON" train "$@" --device cpu-staged --out "${name}_staged" >/dev/null
  same "${name}_cpu" "${name}_staged" "cpu-staged ($name) differs from the cpu"
}
staged_tp gpt_tp2_pp2 4 "${common[@]}" --tp 2 --pp 2 --micro-batches 2
staged_tp bert_tp2 2 --config "$REPO/configs/bert-mlm.toml" --data "$data" --steps 4 \
  --batch-size 8 --seq-len 32 --log-every 0 --eval-every 2 --eval-batches 1 --tp 2
fmnist=/usr/share/datasets/fashion-mnist
if [[ -e $fmnist/train-images-idx3-ubyte.gz ]]; then
  staged_tp alexnet_tp2 2 --config "$REPO/configs/alexnet-fmnist.toml" --steps 4 --batch-size 16 \
    --log-every 0 --eval-every 2 --eval-batches 1 --tp 2
else
  echo "note: $fmnist is missing: alexnet at tp 2 did not run"
fi
echo "staged device reductions ok"
