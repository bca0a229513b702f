#!/usr/bin/env bash
# The CUDA toolchain wiring: `mpitron devices` lists the GPUs of a CUDA build; without a GPU (or
# in a CPU-only build) the test is skipped, saying why.
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
  echo "SKIP: no GPU on this machine"
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
