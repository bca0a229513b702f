#!/usr/bin/env bash
# 1F1B bounds a pipeline stage's activations by the pipeline depth, not the micro-batch count:
# at pp 4, with micro-batches of one sample, 200 micro-batches keep as many activation bytes per
# rank (/trace/rank_activation_bytes: the model's activation sets and scratch plus the pipeline's
# message buffers) as 8 do, after training steps and after the forward-only evaluation alike;
# GPipe keeps all m, so it holds more at m = 8 and grows with m. The message buffers are a pool
# that grows to the most sends in flight, which depends on timing: a rank has at most pp - rank
# activations and a gradient unmatched, so m = 200 may hold up to pp buffers more than m = 8.
# 200 (it was 1000): 25 times the 8 and 50 times the depth is the same proof; GPipe's 200 sets are
# still over 20 times its 8 (the check asks 10), and the 1000-sample runs took most of the time.
export MANY=200
# Usage: pipeline_memory.sh MPITRON REPO WORK [gpt|resnet]: the resnet runs its 6 blocks of 4-16
# channels on Fashion-MNIST (batch-norm groups of one sample, so micro-batches of one hold them).
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
family=${4:-gpt}
if [[ $family == resnet ]]; then
  fmnist=/usr/share/datasets/fashion-mnist
  [[ -e $fmnist/train-images-idx3-ubyte.gz ]] || { echo "SKIP: $fmnist is missing"; exit 77; }
  model=(--config "$REPO/configs/resnet-fmnist.toml" --data "$fmnist" --set model.width=4
    --set model.blocks_per_stage=2 --set model.norm_group=1)
  export MESSAGE_BYTES=$((1 * 4 * 28 * 28 * 4))  # the widest boundary: 1 sample x 4 x 28 x 28
else
  model=(--config small.toml --data "$(corpus)" --seq-len 16)
  export MESSAGE_BYTES=$((1 * 16 * 32 * 4))  # one sample x T 16 x C 32, float32
fi
cat >small.toml <<'EOF'
# A GPT small enough for hundreds of micro-batches in a test.
[model]
type = "gpt"
n_layer = 4
n_head = 2
n_embd = 32
block_size = 16
vocab_size = 256
EOF
run() {  # run SCHEDULE MICRO_BATCHES: one sample per micro-batch, 2 steps, evaluation at the end
  mpiexec -n 4 "$MPITRON" train "${model[@]}" --pp 4 --schedule "$1" \
    --micro-batches "$2" --batch-size "$2" --steps 2 --eval-every 0 \
    --eval-batches 1 --log-every 1 --out "$1_m$2" >"$1_m$2.log" 2>&1 ||
    fail "--schedule $1 --micro-batches $2 failed: $(cat "$1_m$2.log")"
}
for schedule in 1f1b gpipe; do for m in 8 "$MANY"; do run "$schedule" "$m"; done; done
"$PYTHON" - <<'PY'
import os, sys, h5py
def rows(name):  # (step 1: training only; step 2: training and the final evaluation), per rank
    with h5py.File(f"{name}/trace.h5", "r") as f:
        a = f["trace/rank_activation_bytes"][:]
    assert a.shape == (2, 4), f"{name}: rank_activation_bytes has shape {a.shape}"
    return [list(map(int, r)) for r in a]
MANY = int(os.environ["MANY"])
runs = {(s, m): rows(f"{s}_m{m}") for s in ("1f1b", "gpipe") for m in (8, MANY)}
message = int(os.environ["MESSAGE_BYTES"])  # one micro-batch's widest boundary tensor
print(f"activation bytes per rank (pp 4, micro-batches of 1 sample; a message buffer is {message} bytes)")
print(f"{'schedule':>9} {'m':>5} {'after':>9} " + " ".join(f"{'rank ' + str(r):>10}" for r in range(4)))
for (s, m), r in runs.items():
    for after, row in zip(("training", "eval"), r):
        print(f"{s:>9} {m:>5} {after:>9} " + " ".join(f"{x:>10}" for x in row))
errors = []
for i, after in enumerate(("a training step", "the final evaluation")):
    for rank in range(4):
        few, many = runs["1f1b", 8][i][rank], runs["1f1b", MANY][i][rank]
        if many > few + 4 * message:
            errors.append(f"1f1b after {after}, rank {rank}: {many} bytes at m = {MANY} but {few} at "
                          f"m = 8 (+{(many - few) / message:.0f} message buffers)")
    gpipe, one_f_one_b = runs["gpipe", 8][i][0], runs["1f1b", 8][i][0]
    if not gpipe > one_f_one_b:
        errors.append(f"after {after}: GPipe holds {gpipe} bytes on rank 0 at m = 8, not more than "
                      f"1F1B's {one_f_one_b}")
    for rank in range(4):
        if not runs["gpipe", MANY][i][rank] > 10 * runs["gpipe", 8][i][rank]:
            errors.append(f"after {after}, rank {rank}: GPipe's activations do not grow with m "
                          f"({runs['gpipe', 8][i][rank]} at m = 8, {runs['gpipe', MANY][i][rank]} at {MANY})")
for e in errors:
    print("FAIL:", e, file=sys.stderr)
sys.exit(1 if errors else 0)
PY
echo "$family pipeline memory ok"
