#!/usr/bin/env bash
# The CUDA toolchain wiring: `mpitron devices` lists the GPUs of a CUDA build; without a GPU (or
# in a CPU-only build) the test is skipped, saying why, after checking what a CUDA build without a
# GPU still does (`mpitron plan --device cuda`).
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
# Both streams into the file, then shown: the check reads exactly what the binary printed.
"$MPITRON" devices >devices.txt 2>&1 || { cat devices.txt; fail "mpitron devices exited $?"; }
cat devices.txt
if grep -q "built without CUDA" devices.txt; then
  echo "SKIP: this build has no CUDA backend"
  exit 77
fi
if grep -q "no CUDA devices" devices.txt; then
  # A CUDA build without a GPU still plans a GPU run's memory, except cuDNN's convolution
  # workspace, which it refuses in one line (not an abort from inside cuDNN).
  "$MPITRON" plan --config "$REPO/configs/gpt-tiny.toml" --device cuda >plan_gpt.txt 2>&1 ||
    { cat plan_gpt.txt; fail "plan --device cuda (gpt-tiny) without a GPU failed"; }
  grep -q "peak" plan_gpt.txt || { cat plan_gpt.txt; fail "no peak in the GPT's plan"; }
  if "$MPITRON" plan --config "$REPO/configs/resnet-fmnist.toml" --device cuda >plan_cnn.txt 2>&1; then
    cat plan_cnn.txt
    fail "plan --device cuda (resnet) without a GPU succeeded"
  fi
  cat plan_cnn.txt
  grep -q "plan where the job runs" plan_cnn.txt || fail "no clear refusal of the ResNet's plan"
  # Training on the missing GPU says so in a user's words and what to use instead.
  if "$MPITRON" train --config "$REPO/configs/gpt-tiny.toml" --data "$(corpus)" --steps 1 \
    --device cuda --out nogpu >train_cuda.txt 2>&1; then
    fail "train --device cuda without a GPU succeeded"
  fi
  cat train_cuda.txt
  if [[ ! -e /proc/driver/nvidia/version && ! -e /dev/nvidiactl ]]; then
    grep -q "^error: --device cuda: no NVIDIA GPU or driver was found on this machine" train_cuda.txt ||
      fail "train --device cuda without a driver does not say that no GPU or driver was found"
  fi
  grep -q "use --device cpu, or --device cpu-staged" train_cuda.txt ||
    fail "train --device cuda without a GPU does not say what to use instead"
  echo "SKIP: no GPU on this machine (the GPU-less plan checks passed)"
  exit 77
fi
# "cuda:0 NVIDIA H100 80GB HBM3 (sm_90), 79.2 GiB": parentheses escaped, extended syntax, so the
# pattern means the same to every grep.
if ! grep -Eq '^cuda:0 .+ \(sm_[0-9]+\), [0-9]+(\.[0-9]+)? GiB$' devices.txt; then
  echo "devices.txt, bytes made visible:"
  cat -A devices.txt
  fail "no device line"
fi
echo "gpu devices ok"
