#!/usr/bin/env bash
# Dynamic loss scaling (train.loss_scale, for fp16): a power-of-two scale changes no gradient bit,
# so a scaled run's losses equal the unscaled run's bit for bit (one rank, and dp 2 with ZeRO 1);
# the scale doubles after train.loss_scale_window clean steps, the trace records it per step, and
# a resumed run continues the scaler where the checkpoint left it. (The skip-and-halve rule on an
# overflow is tests/test_loss_scale.cpp's: fp32 gradients do not overflow at any float scale.)
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)
# Batch 8 x 32 tokens, not the preset's 32 x 64: every comparison is bit for bit, whatever the shape.
common=(--config "$TINY" --data "$data" --steps 8 --batch-size 8 --seq-len 32 --log-every 0
  --eval-every 4 --eval-batches 1)
scaled=(--set train.loss_scale=65536 --set train.loss_scale_window=3)
"$MPITRON" train "${common[@]}" --out plain >/dev/null
"$MPITRON" train "${common[@]}" "${scaled[@]}" --out scaled >/dev/null
"$MPITRON" compare plain/trace.h5 scaled/trace.h5 --rtol 0 || fail "loss scaling changed the losses"
# Steps 5-8 again from the step-4 checkpoint: the scaler must resume at 2^17, not restart.
"$MPITRON" train "${common[@]}" "${scaled[@]}" --ckpt-every 4 --out resumed >/dev/null
rm resumed/ckpt_8.h5
"$MPITRON" train "${common[@]}" "${scaled[@]}" --resume auto --out resumed >/dev/null
"$PYTHON" - <<'PY'
import math
import h5py
def column(run, name):
    with h5py.File(f"{run}/trace.h5", "r") as f:
        return [float(x) for x in f["trace/" + name][:]]
want = [2.0**16] * 3 + [2.0**17] * 3 + [2.0**18] * 2
for run in ("scaled", "resumed"):
    got = column(run, "loss_scale")
    assert got == want, f"{run}: loss scale per step {got}, want {want}"
    assert column(run, "skipped") == [0.0] * 8, f"{run}: skipped steps"
assert all(math.isnan(x) for x in column("plain", "loss_scale")), "unscaled run records a scale"
print("loss scale per step:", [int(math.log2(x)) for x in want])
PY
"$MPITRON" compare scaled/trace.h5 resumed/trace.h5 --rtol 0 || fail "resumed scaled run differs"
mpiexec -n 2 "$MPITRON" train "${common[@]}" --dp 2 --zero 1 --out dp_plain >/dev/null
mpiexec -n 2 "$MPITRON" train "${common[@]}" --dp 2 --zero 1 "${scaled[@]}" --out dp_scaled >/dev/null
"$MPITRON" compare dp_plain/trace.h5 dp_scaled/trace.h5 --rtol 0 ||
  fail "loss scaling changed the losses at dp 2 with ZeRO 1"
expect_error "loss_scale must be 0 (fp16: 2^16; fp32, bf16: no scaling) or a power of two" \
  "$MPITRON" train "${common[@]}" --set train.loss_scale=3 --out bad
expect_error "loss_scale_window must be at least 1" \
  "$MPITRON" train "${common[@]}" --set train.loss_scale=1024 --set train.loss_scale_window=0 --out bad
echo "loss scale ok"
