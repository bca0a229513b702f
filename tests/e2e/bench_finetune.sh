#!/usr/bin/env bash
# bench/gpu_finetune.sh's walk on any machine (cpu-staged, gpt-tiny): under a cap the recomputed
# 8-bit offloaded step does not fit, it takes the plan's first fitting setting, trains on one fixed
# batch with the loss falling and the measured peak the plan's, and times plain forward and
# backward at the largest micro-batch that fits, so the GPU run it is for does not find it broken.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
PYTHON=$PYTHON bash "$REPO/bench/gpu_finetune.sh" -b "$(dirname "$MPITRON")" -d cpu-staged \
  -m gpt-tiny -C 9MiB -S 32 -B 8 -s 3 -o bench >bench.txt || fail "the bench failed: $(cat bench.txt)"
cat bench.txt
"$PYTHON" - bench/results.jsonl <<'PY' || fail "the bench's results are not what it should measure"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert len(rows) == 1, rows
d = rows[0]
assert d["flags"] == "--recompute block --micro-batches 4", d["flags"]  # the plan's first fit
assert d["micro_batch_rows"] == 2, d
assert d["loss_falls"] and d["last_loss"] < d["first_loss"], d
assert d["peak_mem_bytes"] == d["planned_mem_bytes"] <= 9 * 2**20, d
assert d["host_rss"], d
assert d["plain_tokens_per_s"] > 0 and d["ratio"] > 0, d
PY
echo "bench finetune ok"
