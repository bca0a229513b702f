#!/usr/bin/env bash
# Convergence of the CNN presets on Fashion-MNIST: trains a family for EPOCHS epochs (60000
# training images each) on one process with THREADS threads and prints the test accuracy on the
# whole t10k split (mpitron eval --whole-split), the epochs and the wall time.
# Usage: bench/cnn_converge.sh [-b BUILD] [-e EPOCHS] [-t THREADS] [-o OUT] FAMILY [train flags...]
#   e.g. bench/cnn_converge.sh -e 6 resnet --set model.blocks_per_stage=1
set -euo pipefail
build=build epochs=4 threads=2 out=""
while getopts "b:e:t:o:" opt; do
  case $opt in
    b) build=$OPTARG ;;
    e) epochs=$OPTARG ;;
    t) threads=$OPTARG ;;
    o) out=$OPTARG ;;
    *) exit 1 ;;
  esac
done
shift $((OPTIND - 1))
family=${1:?usage: cnn_converge.sh [-b BUILD] [-e EPOCHS] FAMILY [train flags...]}
shift
repo=$(cd "$(dirname "$0")/.." && pwd)
mpitron=$(realpath "$build")/mpitron
out=${out:-runs/converge_$family}
batch=64
steps=$((epochs * 60000 / batch))
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$(date +%s)
OMP_NUM_THREADS=$threads "$mpitron" train --config "$repo/configs/$family-fmnist.toml" \
  --batch-size $batch --steps "$steps" --eval-every $((steps / epochs)) --eval-batches 20 \
  --ckpt-every $((steps / epochs)) --log-every 200 --out "$out" "$@"
wall=$(($(date +%s) - start))
OMP_NUM_THREADS=$threads "$mpitron" eval --ckpt "$out/ckpt_$steps.h5" --whole-split | tee "$out/eval.txt"
accuracy=$(awk '/^val_accuracy/ {print $2}' "$out/eval.txt")
echo "$family: test accuracy $accuracy on the whole t10k split after $epochs epochs ($steps steps" \
  "of $batch), training wall time ${wall}s with $threads threads"
