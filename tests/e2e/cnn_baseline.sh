#!/usr/bin/env bash
# The 1x1x1 baseline of a CNN family's equivalence rows (augmentation and batch norm on, dropout
# on for alexnet): writes WORK/trace.h5 and, for layout.sh, WORK/flags and WORK/model.
# Usage: cnn_baseline.sh MPITRON REPO WORK FAMILY   (FAMILY: alexnet or resnet)
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
family=$4
fmnist=/usr/share/datasets/fashion-mnist
if [[ ! -e $fmnist/train-images-idx3-ubyte.gz ]]; then
  echo "SKIP: $fmnist is missing (apt-get install dataset-fashion-mnist)"
  exit 77
fi
# Small shapes, so that every row runs in seconds: alexnet 8 channels, batch-norm groups of 4;
# resnet 6 blocks of 8-32 channels (pp 4 as 2,2,1,1, or interleaved 2 x 3 chunks of one), groups of
# 8. The resnet rows train at lr 1e-4: at 2e-3 its ReLU-BN layers amplify the fp32 round-off of a
# different summation order (dp, micro-batches) past 1e-5 within 12 steps (Adam's first steps move
# every weight by about lr, however small its gradient), which says nothing about the layout.
case $family in
  alexnet) shape="--set model.width=8 --set model.hidden=32 --set model.norm_group=4 --dropout 0.2 --batch-size 32" ;;
  resnet) shape="--set model.width=8 --set model.blocks_per_stage=2 --set model.norm_group=8 --batch-size 64 --lr 1e-4" ;;
  *) fail "unknown family $family" ;;
esac
echo "--config $REPO/configs/$family-fmnist.toml --data $fmnist $shape" >model
echo "--steps 12 --set train.augment=1 --eval-every 6 --eval-batches 2 --log-every 6 --warmup-steps 3 --ckpt-every 6" >flags
# shellcheck disable=SC2046  # the flags are words
mpiexec -n 1 "$MPITRON" train $(cat model flags) --out .
