#!/usr/bin/env bash
# The GPU benchmarks' walks on any machine (cpu-staged), so that the GPU runs they are for do not
# find them broken. bench/gpu_finetune.sh on gpt-tiny: under a cap the recomputed 8-bit step
# does not fit, it takes the plan's first fitting setting (more micro-batches, the optimizer state
# offloaded), trains on one fixed batch with the loss falling and the measured peak the plan's,
# and times plain forward and backward at the largest micro-batch that fits.
# bench/family_step.sh -d cpu-staged: AlexNet and ResNet with the GPU's settings (whole presets,
# random images in the data's format) beside torch, in bf16.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
PYTHON=$PYTHON bash "$REPO/bench/gpu_finetune.sh" -b "$(dirname "$MPITRON")" -d cpu-staged \
  -m gpt-tiny -C 9MiB -S 32 -B 8 -s 3 -o bench >bench.txt ||
  fail "the bench failed: $(cat bench.txt)"
cat bench.txt
"$PYTHON" - bench/results.jsonl <<'PY' || fail "the bench's results are not what it should measure"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert len(rows) == 1, rows
d = rows[0]
assert d["flags"] == "--recompute block --micro-batches 4 --offload optimizer", d["flags"]
assert d["micro_batch_rows"] == 2, d
assert d["loss_falls"] and d["last_loss"] < d["first_loss"], d
assert d["peak_mem_bytes"] == d["planned_mem_bytes"] <= 9 * 2**20, d
assert d["host_rss"] and d["outside_fwd_bwd_s"] >= 0, d
assert d["plain_tokens_per_s"] > 0 and d["ratio"] > 0, d
PY
PYTHON=$PYTHON bash "$REPO/bench/family_step.sh" -b "$(dirname "$MPITRON")" -d cpu-staged \
  -f "alexnet resnet" -r 1 -s 3 -B 8 -P bf16 >family.txt ||
  fail "family_step failed: $(cat family.txt)"
cat family.txt
for family in alexnet resnet; do
  grep -Eq "^$family +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$" family.txt ||
    fail "family_step printed no $family row"
done
echo "bench gpu walks ok"
