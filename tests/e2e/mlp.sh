#!/usr/bin/env bash
# The second model family through the same trainer: the MLP on Fashion-MNIST reaches 80%
# validation accuracy in 600 steps, a run resumed from its step-200 checkpoint reproduces the
# uninterrupted trace bit for bit, and `mpitron eval` prints accuracy (over how many samples,
# beside the majority class's score) and a confusion matrix with the class names.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
fmnist=/usr/share/datasets/fashion-mnist
if [[ ! -e $fmnist/train-images-idx3-ubyte.gz ]]; then
  echo "SKIP: $fmnist is missing (apt-get install dataset-fashion-mnist)"
  exit 77
fi
MLP=$REPO/configs/mlp-fmnist.toml
args=(train --config "$MLP" --steps 600 --ckpt-every 200 --eval-every 100 --log-every 100)
"$MPITRON" "${args[@]}" --out full | tee full.log
# The log says what an accuracy is over and what the majority class alone would score (t10k holds
# 1000 images of each of the 10 classes).
grep -qE "acc [0-9.]+% of [0-9]+ \(majority class 10\.0%\)" full.log ||
  fail "the log's accuracy says neither its sample count nor the majority class's score"
"$PYTHON" - full/trace.h5 <<'PY'
import math, sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    loss, acc = f["trace/loss"][:], f["trace/val_accuracy"][:]
    assert f.attrs["model.type"] == "mlp", f.attrs["model.type"]
measured = [a for a in acc if not math.isnan(a)]
print(f"first loss {loss[0]:.3f}, last {loss[-1]:.3f}, validation accuracy {measured}")
assert len(loss) == 600 and abs(loss[0] - math.log(10)) < 0.5, "first loss is not near ln(10)"
assert len(measured) == 6, "validation accuracy is not recorded every 100 steps"
assert measured[-1] >= 0.80, f"validation accuracy {measured[-1]:.3f} is below 80%"
PY

mkdir -p resumed
cp full/trace.h5 full/ckpt_200.h5 resumed/
"$MPITRON" "${args[@]}" --out resumed --resume resumed/ckpt_200.h5
"$MPITRON" compare full/trace.h5 resumed/trace.h5 --rtol 0 || fail "resumed run differs"
for column in step val_loss val_accuracy; do
  cmp <(trace_column full/trace.h5 $column) <(trace_column resumed/trace.h5 $column) ||
    fail "resumed trace differs in $column"
done

"$MPITRON" eval --ckpt full/ckpt_600.h5 --batches 10 --batch-size 100 >eval.txt
cat eval.txt
grep -q '^val_accuracy 0\.[89]' eval.txt || fail "eval accuracy missing or below 80%"
[[ $(grep -cE '^ +[0-9]+( +[0-9]+){10}$' eval.txt) == 10 ]] || fail "eval printed no 10x10 confusion matrix"
grep -qE "^val_accuracy 0\.[0-9]+ over 1000 samples$" eval.txt || fail "eval does not say how many samples"
grep -qE "^majority class [0-9] \(.*\) alone would score 0\.[0-9]+$" eval.txt ||
  fail "eval gives no majority-class score"
grep -q "^classes: 0 T-shirt/top, 1 Trouser, .*9 Ankle boot$" eval.txt || fail "eval names no classes"
expect_error "does not generate text" "$MPITRON" generate --ckpt full/ckpt_600.h5 --new-tokens 3
expect_error "holds a 'mlp' model" "$MPITRON" train --config "$TINY" --data "$(corpus)" --steps 2 \
  --out resumed --resume full/ckpt_600.h5
echo "mlp ok"
