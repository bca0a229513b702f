#!/usr/bin/env bash
# The 1x1x1 baseline of the MLP's equivalence rows (dropout on): writes WORK/trace.h5 and, for
# layout.sh, WORK/flags (the shared flags) and WORK/model (config and data).
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
fmnist=/usr/share/datasets/fashion-mnist
if [[ ! -e $fmnist/train-images-idx3-ubyte.gz ]]; then
  echo "SKIP: $fmnist is missing (apt-get install dataset-fashion-mnist)"
  exit 77
fi
echo "--config $REPO/configs/mlp-fmnist.toml --data $fmnist" >model
echo "--steps 60 --batch-size 48 --dropout 0.1 --eval-every 20 --log-every 20 --warmup-steps 5 --ckpt-every 20" >flags
# shellcheck disable=SC2046  # the flags are words
mpiexec -n 1 "$MPITRON" train $(cat model flags) --out .
