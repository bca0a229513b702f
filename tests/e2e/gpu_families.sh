#!/usr/bin/env bash
# The other families on --device cuda against the CPU: BERT (masked LM, classifier; tp 2; bf16 and
# fp16), the MLP and AlexNet and ResNet (cuDNN's convolutions; bf16 and fp16) follow the CPU's
# losses, and dp 2 on the one GPU its one-rank run. Skipped, saying why, without a CUDA build or
# GPU; the CNN part without cuDNN, the MLP part without Fashion-MNIST.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
require_gpu
data=$(corpus)
# BERT on the GPU's layer table, the masked LM and the testament classifier (padding masks): within
# 1e-4 of the CPU's losses, and dp 2 on the one GPU within 1e-5 of the GPU's one-rank run.
# bert_gpu TASK ARGS...: the CPU and the GPU, and the GPU at dp 2.
bert_gpu() {
  local task=$1
  shift
  "$MPITRON" train "$@" --device cpu --out "bert_${task}_cpu" >/dev/null
  "$MPITRON" train "$@" --device cuda --out "bert_${task}_gpu" | tee "bert_${task}_gpu.log"
  "$MPITRON" compare "bert_${task}_cpu/trace.h5" "bert_${task}_gpu/trace.h5" --rtol 1e-4 ||
    fail "bert ($task): the GPU's losses left the CPU's"
  mpiexec -n 2 "$MPITRON" train "$@" --dp 2 --device cuda --out "bert_${task}_gpu_dp2" >/dev/null
  "$MPITRON" compare "bert_${task}_gpu/trace.h5" "bert_${task}_gpu_dp2/trace.h5" --rtol 1e-5 ||
    fail "bert ($task) at dp 2 on the GPU left its one-rank run"
}
bert_gpu mlm --config "$REPO/configs/bert-mlm.toml" --data "$data" --steps 20 --batch-size 8 \
  --seq-len 64 --log-every 5 --eval-every 10 --eval-batches 2
bert_gpu testament --config "$REPO/configs/bert-testament.toml" --data "$(verses)" --steps 20 \
  --batch-size 8 --log-every 5 --eval-every 10 --eval-batches 2
# The encoder at tp 2 on the one GPU against the CPU's tp 2.
bert_tp=(--config "$REPO/configs/bert-mlm.toml" --data "$data" --steps 10 --batch-size 8
  --seq-len 64 --log-every 5 --eval-every 5 --eval-batches 1 --tp 2)
mpiexec -n 2 "$MPITRON" train "${bert_tp[@]}" --out bert_cpu_tp2 >/dev/null
mpiexec -n 2 "$MPITRON" train "${bert_tp[@]}" --device cuda --out bert_gpu_tp2 >/dev/null
"$MPITRON" compare bert_cpu_tp2/trace.h5 bert_gpu_tp2/trace.h5 --rtol 1e-4 ||
  fail "bert at tp 2 on the GPU left the CPU's tp 2"
# The encoder in 16 bits on the GPU's bf16 and fp16 kernels: within 2% of the CPU's fp32 run.
for p in bf16 fp16; do
  "$MPITRON" train --config "$REPO/configs/bert-testament.toml" --data "$(verses)" --steps 20 \
    --batch-size 8 --log-every 5 --eval-every 10 --eval-batches 2 --device cuda --precision "$p" \
    --out "bert_testament_gpu_$p" >/dev/null
  "$MPITRON" compare bert_testament_cpu/trace.h5 "bert_testament_gpu_$p/trace.h5" --rtol 0.02 ||
    fail "bert (testament) in $p on the GPU strays from the CPU's fp32"
done
# The MLP on the GPU's layer table: within 1e-4 of the CPU's losses and validation accuracy's
# evaluations, and dp 2 on the one GPU within 1e-5 of the GPU's one-rank run.
fmnist=/usr/share/datasets/fashion-mnist
if [[ -e $fmnist/train-images-idx3-ubyte.gz ]]; then
  mlp=(--config "$REPO/configs/mlp-fmnist.toml" --steps 20 --log-every 5 --eval-every 10
    --eval-batches 2)
  "$MPITRON" train "${mlp[@]}" --device cpu --out mlp_cpu >/dev/null
  "$MPITRON" train "${mlp[@]}" --device cuda --out mlp_gpu | tee mlp_gpu.log
  "$MPITRON" compare mlp_cpu/trace.h5 mlp_gpu/trace.h5 --rtol 1e-4 ||
    fail "the mlp's GPU losses left the CPU's"
  mpiexec -n 2 "$MPITRON" train "${mlp[@]}" --dp 2 --device cuda --out mlp_gpu_dp2 >/dev/null
  "$MPITRON" compare mlp_gpu/trace.h5 mlp_gpu_dp2/trace.h5 --rtol 1e-5 ||
    fail "the mlp at dp 2 on the GPU left its one-rank run"
  # In 16 bits (the GPU's bf16 and fp16 kernels, the images rounded on the device): within 2% of
  # the CPU's fp32 run, as the GPT.
  for p in bf16 fp16; do
    "$MPITRON" train "${mlp[@]}" --device cuda --precision "$p" --out "mlp_gpu_$p" >/dev/null
    "$MPITRON" compare mlp_cpu/trace.h5 "mlp_gpu_$p/trace.h5" --rtol 0.02 ||
      fail "the mlp in $p on the GPU strays from the CPU's fp32"
  done
else
  echo "note: $fmnist is missing: the mlp part did not run"
fi
# AlexNet and ResNet on the GPU's layer table (cuDNN's convolutions, the ghost-group batch norm and
# pooling kernels): within 1e-4 of the CPU's losses and validation losses, and dp 2 on the one GPU
# within 1e-5 of the GPU's one-rank run. On Fashion-MNIST where it is installed, else on random
# images in its format (the GPU machines need not have the data package).
images=$fmnist
cnn_families=(alexnet resnet)
if grep -q "^cudnn: not in this build" devices.txt; then
  echo "note: this build has no cuDNN: the AlexNet and ResNet part did not run"
  cnn_families=()
fi
if [[ ! -e $fmnist/train-images-idx3-ubyte.gz ]]; then
  images=synthetic_images
  mkdir -p "$images"
  "${PYTHON:-python3}" - "$images" <<'PY'
import random, struct, sys
rng = random.Random(7)
for split, n in (("train", 512), ("t10k", 128)):
    labels = bytes(rng.randrange(10) for _ in range(n))
    pixels = bytes(rng.randrange(256) for _ in range(n * 28 * 28))
    with open(f"{sys.argv[1]}/{split}-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28) + pixels)
    with open(f"{sys.argv[1]}/{split}-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + labels)
PY
fi
# ResNet at lr 1e-4, as its CPU equivalence rows (cnn_baseline.sh): at the preset's 2e-3 its
# ReLU-BN layers amplify the round-off of another summation order within 10 steps (dp 2 against
# one rank on the CPU: 1.1e-3 apart at 2e-3, 1.1e-6 at 1e-4), which says nothing about the device.
for fam in "${cnn_families[@]}"; do
  cnn=(--config "$REPO/configs/$fam-fmnist.toml" --data "$images" --steps 10 --batch-size 16
    --log-every 5 --eval-every 5 --eval-batches 2)
  [[ $fam != resnet ]] || cnn+=(--lr 1e-4)
  "$MPITRON" train "${cnn[@]}" --device cpu --out "${fam}_cpu" >/dev/null
  "$MPITRON" train "${cnn[@]}" --device cuda --out "${fam}_gpu" | tee "${fam}_gpu.log"
  "$MPITRON" compare "${fam}_cpu/trace.h5" "${fam}_gpu/trace.h5" --rtol 1e-4 ||
    fail "$fam: the GPU's losses left the CPU's"
  mpiexec -n 2 "$MPITRON" train "${cnn[@]}" --dp 2 --device cuda --out "${fam}_gpu_dp2" >/dev/null
  "$MPITRON" compare "${fam}_gpu/trace.h5" "${fam}_gpu_dp2/trace.h5" --rtol 1e-5 ||
    fail "$fam at dp 2 on the GPU left its one-rank run"
  # In 16 bits (cuDNN on bf16 and fp16 data, the batch-norm and pooling kernels in the storage
  # type): within 2% of the CPU's fp32 run, as the GPT.
  for p in bf16 fp16; do
    "$MPITRON" train "${cnn[@]}" --device cuda --precision "$p" --out "${fam}_gpu_$p" >/dev/null
    "$MPITRON" compare "${fam}_cpu/trace.h5" "${fam}_gpu_$p/trace.h5" --rtol 0.02 ||
      fail "$fam in $p on the GPU strays from the CPU's fp32"
  done
done
echo "gpu families ok"
