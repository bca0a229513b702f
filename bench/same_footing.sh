# shellcheck shell=bash
# Sourced by the bench scripts that time PyTorch beside mpitron, so that both run on the same
# footing:
# - the same matrix-product kernels: Debian's torch links the same OpenBLAS (libblas.so.3), which
#   gets the kernel set mpitron uses for this CPU (OPENBLAS_CORETYPE as `mpitron devices` reports
#   it), unless the caller set one;
# - no allocator churn: glibc hands allocations over its mmap threshold back to the kernel when
#   freed, and PyTorch frees its activations every step, so each step page-faults them in again
#   (2.5-6 s instead of 1.6 s for the GPT-2 124M step in a virtual machine). torch_env keeps
#   them in the heap (mmap threshold 32 MiB, glibc's most; no trimming); mpitron allocates nothing
#   in a step.
# Needs $mpitron (the binary). Run torch as "${torch_env[@]}" python ...
if [[ -z ${OPENBLAS_CORETYPE:-} && -x ${mpitron:-} ]]; then
  kernels=$("$mpitron" devices 2>/dev/null | sed -n 's/^cpu: gemm via openblas, kernels //p')
  [[ -n $kernels ]] && export OPENBLAS_CORETYPE=$kernels
fi
# shellcheck disable=SC2034  # read by the scripts that source this one
torch_env=(env MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=68719476736
  MALLOC_TOP_PAD_=1073741824)
