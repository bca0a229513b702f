#!/usr/bin/env bash
# The CUDA toolchain wiring: `mpitron devices` lists the GPUs of a CUDA build; without a GPU (or
# in a CPU-only build) the test is skipped, saying why.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
"$MPITRON" devices | tee devices.txt
if grep -q "built without CUDA" devices.txt; then
  echo "SKIP: this build has no CUDA backend"
  exit 77
fi
if grep -q "no CUDA devices" devices.txt; then
  echo "SKIP: no GPU on this machine"
  exit 77
fi
grep -q "^cuda:0 .*(sm_[0-9]*), [0-9.]* GiB" devices.txt || fail "no device line"
