#!/usr/bin/env bash
# The memory plan and --max-device-memory: `mpitron plan` answers for GPT-2 Large on an 11 GiB GPU
# without allocating it (and names settings that fit); a run whose plan is above the cap is refused
# before any work, in every family; a run under the cap trains and its measured peak matches the
# plan (the allocator's own cap, for what a plan would miss: tests/test_memory_plan.cpp).
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)

# GPU plans need the CUDA build's layer table (its attention and LM-head alignment).
if "$MPITRON" plan --config "$TINY" --device cuda >/dev/null 2>&1; then
  # GPT-2 Large at batch 64 x 1024 does not fit 11 GiB as given; the plan says so (exit 1) and lists
  # what would, each of which must itself plan under the cap.
  set +e
  "$MPITRON" plan --config "$REPO/configs/gpt2-large.toml" --batch-size 64 --seq-len 1024 \
    --device cuda --precision bf16 --max-device-memory 11GiB >large.txt
  rc=$?
  set -e
  cat large.txt
  [[ $rc == 1 ]] || fail "plan of gpt2-large at 11 GiB exited $rc, not 1 (does not fit)"
  grep -q "^fp32 parameters .*2.9 GiB" large.txt || fail "gpt2-large's fp32 parameters are not 2.9 GiB"
  grep -q "does not fit --max-device-memory 11.0 GiB" large.txt || fail "no 'does not fit' line"
  grep -q "^  fits: .*--optimizer adamw8bit --offload optimizer" large.txt ||
    fail "the plan names no 8-bit, offloaded setting that fits"
  # The fine-tuning preset with the flags its comment gives fits (exit 0).
  "$MPITRON" plan --config "$REPO/configs/gpt2-large-finetune.toml" --device cuda --precision bf16 \
    --recompute block --optimizer adamw8bit --offload optimizer --max-device-memory 11GiB >ft.txt ||
    fail "gpt2-large-finetune with its flags does not fit 11 GiB: $(cat ft.txt)"
  grep -q "^fits --max-device-memory 11.0 GiB" ft.txt || fail "no 'fits' line: $(cat ft.txt)"
  "$MPITRON" plan --config "$REPO/configs/gpt2-xl-finetune.toml" --device cuda --precision bf16 \
    --recompute block --optimizer adamw8bit --offload optimizer,master \
    --max-device-memory 11GiB >xl.txt || fail "gpt2-xl-finetune does not fit 11 GiB: $(cat xl.txt)"
else
  echo "this build has no CUDA layers: the GPU plans were not tried"
fi

# GPT-2 XL on a device (the CPU's layers under a device's paths) with its optimizer state in host
# memory does not fit 11 GiB: its fp32 master weights, 16-bit copy and fp32 gradients alone are
# 14.5 GiB. The plan names the master weights' offload, which fits, and moves them to a host row.
xl=(--config "$REPO/configs/gpt2-xl-finetune.toml" --device cpu-staged --precision bf16
  --recompute block --optimizer adamw8bit --max-device-memory 11GiB)
set +e
"$MPITRON" plan "${xl[@]}" --offload optimizer >xl_staged.txt
rc=$?
set -e
[[ $rc == 1 ]] || fail "gpt2-xl with only its optimizer offloaded fits 11 GiB: $(cat xl_staged.txt)"
grep -q "^  fits: --offload optimizer,master (" xl_staged.txt ||
  fail "the plan does not name the master weights' offload: $(cat xl_staged.txt)"
"$MPITRON" plan "${xl[@]}" --offload optimizer,master >xl_master.txt ||
  fail "gpt2-xl with its master weights offloaded does not fit 11 GiB: $(cat xl_master.txt)"
grep -q "^fp32 parameters (host) .*5.8 GiB" xl_master.txt ||
  fail "gpt2-xl's master weights are not a 5.8 GiB host row: $(cat xl_master.txt)"
grep -q "^host total  *8.8 GiB" xl_master.txt ||
  fail "gpt2-xl's host memory (master weights, 8-bit moments) is not 8.8 GiB: $(cat xl_master.txt)"

# gpt-tiny: the plan's peak in bytes, then a cap a little below it is refused before any work.
"$MPITRON" plan --config "$TINY" --batch-size 8 --seq-len 32 >tiny.txt
peak=$(sed -n 's/^peak per rank: .* (\([0-9]*\) bytes)$/\1/p' tiny.txt)
[[ $peak -gt 0 ]] || fail "no peak in the plan: $(cat tiny.txt)"
set +e
"$MPITRON" train --config "$TINY" --data "$data" --steps 2 --batch-size 8 --seq-len 32 \
  --max-device-memory $((peak - 1)) --out refused >refused.txt 2>&1
rc=$?
set -e
cat refused.txt
[[ $rc == 1 ]] || fail "a cap below the plan exited $rc, not 1"
grep -q "the memory plan does not fit --max-device-memory" refused.txt || fail "no plan refusal"
grep -q "fits: --micro-batches" refused.txt || fail "the refusal names no settings that fit"
[[ ! -e refused/trace.h5 ]] || fail "the refused run started (it wrote a trace)"

# At the plan's own peak the run trains, and its measured peak is the plan's.
"$MPITRON" train --config "$TINY" --data "$data" --steps 2 --batch-size 8 --seq-len 32 \
  --max-device-memory "$peak" --out fits | tee fits.txt
check_memory_plan fits.txt
grep -q "within 0.00% of the plan" fits.txt || fail "one rank's peak is not exactly the plan"

# Every family plans: each preset's plan, then the image families' refusal below it (the
# equivalence matrix checks the plans against the measured peaks in every layout it runs).
for preset in mlp-fmnist alexnet-fmnist resnet-fmnist bert-mlm bert-testament; do
  "$MPITRON" plan --config "$REPO/configs/$preset.toml" >"$preset.txt" ||
    fail "no plan for $preset: $(cat "$preset.txt")"
  grep -q "^peak per rank: " "$preset.txt" || fail "$preset's plan has no peak: $(cat "$preset.txt")"
done
# Over pipeline stages too: a column per stage, with the message buffers the schedule fixes (the
# equivalence matrix's pipeline rows check them against the measured peaks).
"$MPITRON" plan --config "$REPO/configs/resnet-fmnist.toml" --pp 3 --micro-batches 4 >resnet-pp3.txt ||
  fail "no plan for resnet at pp 3: $(cat resnet-pp3.txt)"
grep -Eq "^pipeline send buffers( +[0-9.]+ [KMG]?i?B){3}$" resnet-pp3.txt ||
  fail "resnet's plan at pp 3 has no send buffers per stage: $(cat resnet-pp3.txt)"
grep -q "batch 64 in 1 micro-batches, fp32" mlp-fmnist.txt ||
  fail "an image family's plan names a sequence length: $(head -1 mlp-fmnist.txt)"
fmnist=/usr/share/datasets/fashion-mnist
if [[ -e $fmnist/train-images-idx3-ubyte.gz ]]; then
  for preset in mlp-fmnist resnet-fmnist; do
    rc=0
    "$MPITRON" train --config "$REPO/configs/$preset.toml" --data "$fmnist" --steps 1 \
      --max-device-memory 100KiB --out "refused-$preset" >"refused-$preset.txt" 2>&1 || rc=$?
    [[ $rc == 1 ]] || fail "$preset above the cap exited $rc, not 1: $(cat "refused-$preset.txt")"
    grep -q "^error: the memory plan does not fit --max-device-memory 100.0 KiB" \
      "refused-$preset.txt" || fail "no plan refusal for $preset: $(cat "refused-$preset.txt")"
    [[ ! -e refused-$preset/trace.h5 ]] || fail "the refused $preset run started"
  done
else
  echo "the image families' refusal not tried: $fmnist is missing"
fi

# Sizes the flag does not take.
expect_error "give a size such as 11GiB" "$MPITRON" plan --config "$TINY" --max-device-memory 11XB
echo "memory plan: ok"
