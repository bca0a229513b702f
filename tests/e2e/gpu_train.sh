#!/usr/bin/env bash
# --device cuda against the CPU: 20 steps of gpt-tiny (dropout on, so the Philox masks must agree)
# follow the CPU's trace within 1e-4 relative at every step; --recompute block gives the GPU's
# losses bit for bit; a GPU run stopped at step 10 and resumed ends where the straight one does
# (the checkpoint passes through host copies); dp 2 on one GPU follows the CPU's dp 2 runs; bf16
# and fp16 stay within 2% of the CPU's fp32 losses; pp 2, tp 2 and tp 2 x pp 2 follow the CPU's.
# The other families: gpu_families.sh; --offload and 8-bit AdamW: gpu_offload.sh (apart, so that
# they run side by side). Skipped, saying why, without a CUDA build or GPU.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
require_gpu
data=$(corpus)
common=(--config "$TINY" --data "$data" --steps 20 --log-every 5 --eval-every 10 --eval-batches 2)
"$MPITRON" train "${common[@]}" --device cpu --out cpu >cpu.log
"$MPITRON" train "${common[@]}" --device cuda --out gpu | tee gpu.log
grep -q "gemm cublas" gpu.log || fail "the GPU run does not say it multiplies with cuBLAS"
"$MPITRON" compare cpu/trace.h5 gpu/trace.h5 --rtol 1e-4 || fail "the GPU's losses left the CPU's"
"$MPITRON" train "${common[@]}" --device cuda --recompute block --out gpu_recompute >/dev/null
"$MPITRON" compare gpu/trace.h5 gpu_recompute/trace.h5 --rtol 0 ||
  fail "recompute changed the GPU's losses"
# Resuming with --steps 20 changes the run's train.steps (refused unless --allow-changes); all 20
# steps are within gpt-tiny's 50 warm-up steps, so the learning rates do not depend on it.
"$MPITRON" train "${common[@]}" --device cuda --steps 10 --out gpu_resumed >/dev/null
"$MPITRON" train "${common[@]}" --device cuda --resume auto --allow-changes --out gpu_resumed >/dev/null
"$MPITRON" compare gpu/trace.h5 gpu_resumed/trace.h5 --rtol 0 ||
  fail "a resumed GPU run differs from the straight one"
"$PYTHON" - <<'PY'
import h5py
def peak(run):
    with h5py.File(f"{run}/trace.h5", "r") as f:
        assert f.attrs["device"] == "cuda", f.attrs["device"]
        return int(f["trace/rank_peak_mem_bytes"][-1].max())
full, block = peak("gpu"), peak("gpu_recompute")
print(f"GPU peak bytes: {full} without recompute, {block} with ({block / full:.2f})")
assert block < full, "recompute did not lower the GPU's peak"
PY
# bf16 and fp16 (16-bit activations and layer weights, fp32 master weights and moments) within 2%
# of the CPU's fp32 at every step, at a learning rate where gpt-tiny has no loss spikes (a spike
# magnifies any difference); their activations take less memory; fp16 recovers from a forced
# overflow (2^32 times the loss gradient): skipped steps halving the scale, then training.
smooth=(--lr 1e-3)
"$MPITRON" train "${common[@]}" "${smooth[@]}" --device cpu --out cpu_smooth >/dev/null
"$MPITRON" train "${common[@]}" "${smooth[@]}" --device cuda --out gpu_smooth >/dev/null
for p in bf16 fp16; do
  "$MPITRON" train "${common[@]}" "${smooth[@]}" --device cuda --precision "$p" --out "gpu_$p" |
    tee "gpu_$p.log"
  "$MPITRON" compare cpu_smooth/trace.h5 "gpu_$p/trace.h5" --rtol 0.02 ||
    fail "the GPU's $p losses left the CPU's fp32 ones by over 2%"
done
"$MPITRON" train "${common[@]}" "${smooth[@]}" --device cuda --precision bf16 --recompute block \
  --out gpu_bf16_recompute >/dev/null
"$MPITRON" compare gpu_bf16/trace.h5 gpu_bf16_recompute/trace.h5 --rtol 0 ||
  fail "recompute changed the GPU's bf16 losses"
# bf16 over two pipeline stages (bf16 messages through the host) and at tp 2 (the 16-bit partial
# sums added in fp32 on the host) on the one GPU: within 2% of the CPU's fp32 too.
for layout in "--pp 2 --micro-batches 4" "--tp 2"; do
  name=$(echo "$layout" | tr -d ' -')
  read -ra flags <<<"$layout"
  mpiexec -n 2 "$MPITRON" train "${common[@]}" "${smooth[@]}" --device cuda --precision bf16 \
    "${flags[@]}" --out "gpu_bf16_$name" >/dev/null
  "$MPITRON" compare cpu_smooth/trace.h5 "gpu_bf16_$name/trace.h5" --rtol 0.02 ||
    fail "the GPU's bf16 at $layout left the CPU's fp32 losses by over 2%"
done
# A 20-step warm-up, as precision.sh's: over gpt-tiny's 50 the scale overflows once more mid-run.
"$MPITRON" train "${common[@]}" "${smooth[@]}" --device cuda --precision fp16 --warmup-steps 20 \
  --set train.loss_scale=4294967296 --out gpu_overflow >/dev/null
"$PYTHON" - <<'PY'
import math
import h5py
def peak(run):
    with h5py.File(f"{run}/trace.h5", "r") as f:
        return int(f["trace/rank_peak_mem_bytes"][-1].max())
print({run: peak(run) for run in ("gpu_smooth", "gpu_bf16", "gpu_fp16")})
assert peak("gpu_bf16") < peak("gpu_smooth"), "bf16 activations take no less memory than fp32"
with h5py.File("gpu_overflow/trace.h5", "r") as f:
    skipped = [int(x) for x in f["trace/skipped"][:]]
    scale = [int(math.log2(x)) for x in f["trace/loss_scale"][:]]
    loss = [float(x) for x in f["trace/loss"][:]]
print("forced overflow: skipped", skipped, "log2 scale", scale)
k = skipped.index(0)
assert k >= 1 and not any(skipped[k:]), f"skips are not a prefix: {skipped}"
assert scale == [32 - min(i, k) for i in range(len(scale))], f"scale not halved per skip: {scale}"
assert loss[-1] < loss[k] - 0.5, f"no learning after the recovery: {loss}"
PY
# NCCL at one rank (it refuses two on one GPU): set up and torn down around the same steps.
if grep -q "^nccl: [0-9]" devices.txt; then
  "$MPITRON" train "${common[@]}" --device cuda --comm nccl --out gpu_nccl | tee nccl.log
  "$MPITRON" compare gpu/trace.h5 gpu_nccl/trace.h5 --rtol 0 || fail "--comm nccl changed the losses"
fi
# Two ranks on two GPUs with NCCL summing their gradients (ZeRO 0, its buckets during backward,
# ZeRO 1, and ZeRO 1 with the update on the host), at tp 2 (the TP all-reduces on the compute
# stream) and pp 2 (the tied embedding's sum over the first and last stage): within 1e-5 of the
# same layout through MPI (NCCL's ring adds in another order). With four GPUs also dp 2 x tp 2
# (the dp buckets beside a TP communicator) and dp 2 x pp 2 at ZeRO 1. Needs two GPUs: said and
# left out on one.
nccl_against_mpi() {  # ranks, then the layout's flags
  local n=$1 name
  shift
  name=$(echo "$*" | tr -d ' -.')
  for c in nccl mpi; do
    mpiexec -n "$n" "$MPITRON" train "${common[@]}" "$@" --device cuda --comm "$c" \
      --out "gpu${n}_${c}_$name" >/dev/null
  done
  "$MPITRON" compare "gpu${n}_mpi_$name/trace.h5" "gpu${n}_nccl_$name/trace.h5" --rtol 1e-5 ||
    fail "NCCL at $* over $n GPUs left MPI's losses"
}
if grep -q "^nccl: [0-9]" devices.txt && grep -q "^cuda:1 " devices.txt; then
  nccl_against_mpi 2 --dp 2 --zero 0
  nccl_against_mpi 2 --dp 2 --zero 0 --bucket-mb 0.05
  nccl_against_mpi 2 --dp 2 --zero 1
  nccl_against_mpi 2 --dp 2 --zero 1 --offload optimizer
  nccl_against_mpi 2 --tp 2
  nccl_against_mpi 2 --pp 2 --micro-batches 4
  if grep -q "^cuda:3 " devices.txt; then
    nccl_against_mpi 4 --dp 2 --tp 2 --bucket-mb 0.05
    nccl_against_mpi 4 --dp 2 --pp 2 --micro-batches 4 --zero 1
  else
    echo "note: fewer than four GPUs: the four-rank NCCL layouts did not run"
  fi
else
  echo "note: fewer than two GPUs (or no NCCL): the two-GPU NCCL part did not run"
fi
# Two ranks on the one GPU, their collectives staged through the host (Open MPI is not CUDA-aware),
# against the CPU's runs of the same layouts.
for layout in "--zero 0" "--zero 0 --bucket-mb 0.05" "--zero 1" "--zero 2"; do
  name=$(echo "$layout" | tr -d ' -')
  read -ra flags <<<"$layout"
  mpiexec -n 2 "$MPITRON" train "${common[@]}" --dp 2 "${flags[@]}" --out "cpu_$name" >/dev/null
  mpiexec -n 2 "$MPITRON" train "${common[@]}" --dp 2 "${flags[@]}" --device cuda \
    --out "gpu_$name" >/dev/null
  "$MPITRON" compare "cpu_$name/trace.h5" "gpu_$name/trace.h5" --rtol 1e-4 ||
    fail "the GPU at dp 2 ($layout) left the CPU's losses"
done
# Two pipeline stages on the one GPU (1F1B, 4 micro-batches), their messages and the tied
# embedding's sum staged through the host: within 1e-4 of the CPU's pp 2.
mpiexec -n 2 "$MPITRON" train "${common[@]}" --pp 2 --micro-batches 4 --out cpu_pp2 >/dev/null
mpiexec -n 2 "$MPITRON" train "${common[@]}" --pp 2 --micro-batches 4 --device cuda --out gpu_pp2 \
  >/dev/null
"$MPITRON" compare cpu_pp2/trace.h5 gpu_pp2/trace.h5 --rtol 1e-4 ||
  fail "the GPU at pp 2 left the CPU's losses"
# Tensor parallelism on the one GPU: two ranks at tp 2 (--comm mpi: their all-reduces staged
# through the host), the shard kernels (row-parallel bias, the embedding's shard and its
# backward, the cross-entropy's steps); within 1e-4 of the CPU's tp 2, then tp 2 x pp 2.
for layout in "--tp 2" "--tp 2 --pp 2 --micro-batches 2"; do
  name=$(echo "$layout" | tr -d ' -')
  read -ra flags <<<"$layout"
  ranks=2
  [[ $layout == *"--pp 2"* ]] && ranks=4
  mpiexec -n "$ranks" "$MPITRON" train "${common[@]}" "${flags[@]}" --out "cpu_$name" >/dev/null
  mpiexec -n "$ranks" "$MPITRON" train "${common[@]}" "${flags[@]}" --device cuda \
    --out "gpu_$name" >/dev/null
  "$MPITRON" compare "cpu_$name/trace.h5" "gpu_$name/trace.h5" --rtol 1e-4 ||
    fail "the GPU at $layout left the CPU's losses"
done
echo "gpu train ok"
