#!/usr/bin/env bash
# The CNN families through the same trainer: a short alexnet run on Fashion-MNIST passes 75%
# validation accuracy (the full figures, >= 89% alexnet and >= 91% resnet, are bench/cnn_converge.sh),
# a resnet resumes bit for bit with its batch-norm running statistics, `mpitron eval` prints the
# accuracy and the confusion matrix, and bad input gets one clear line on every rank.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
fmnist=/usr/share/datasets/fashion-mnist
if [[ ! -e $fmnist/train-images-idx3-ubyte.gz ]]; then
  echo "SKIP: $fmnist is missing (apt-get install dataset-fashion-mnist)"
  exit 77
fi
ALEX=$REPO/configs/alexnet-fmnist.toml
RES=$REPO/configs/resnet-fmnist.toml
"$MPITRON" train --config "$ALEX" --set model.width=16 --set model.hidden=128 --steps 300 \
  --eval-every 100 --eval-batches 20 --log-every 100 --warmup-steps 20 --out alex
"$PYTHON" - alex/trace.h5 <<'PY'
import math, sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    loss, acc = f["trace/loss"][:], f["trace/val_accuracy"][:]
    assert f.attrs["model.type"] == "alexnet", f.attrs["model.type"]
    assert f.attrs["train.augment"] == 1, "the preset trains with augmentation"
measured = [a for a in acc if not math.isnan(a)]
print(f"first loss {loss[0]:.3f}, last {loss[-1]:.3f}, validation accuracy {measured}")
assert len(measured) == 3, "validation accuracy is not recorded every 100 steps"
assert measured[-1] >= 0.75, f"validation accuracy {measured[-1]:.3f} is below 75%"
PY
"$MPITRON" eval --ckpt alex/ckpt_300.h5 --batches 10 --batch-size 100 >eval.txt
cat eval.txt
grep -qE "^val_accuracy 0\.(7[5-9]|[89])" eval.txt || fail "eval accuracy missing or below 75%"
[[ $(grep -cE '^ +[0-9]+( +[0-9]+){10}$' eval.txt) == 10 ]] || fail "eval printed no 10x10 confusion matrix"
# The whole t10k split once, in order: Fashion-MNIST's test set has 1000 images of every class.
"$MPITRON" eval --ckpt alex/ckpt_300.h5 --whole-split --batch-size 300 >whole.txt
grep -q "every one of the 10000 validation images" whole.txt || fail "--whole-split: $(head -1 whole.txt)"
[[ $(grep -E '^ +[0-9]+( +[0-9]+){10}$' whole.txt | awk '{s = 0; for (i = 2; i <= NF; i++) s += $i;
  print s}' | sort -u) == 1000 ]] || fail "--whole-split did not see 1000 images of every class"

# Resume: the running statistics travel in the checkpoint (/buffers), so the resumed validation
# losses (evaluation mode reads them) equal the uninterrupted run's.
small=(--config "$RES" --set model.width=8 --set model.blocks_per_stage=1 --steps 20
  --ckpt-every 10 --eval-every 10 --eval-batches 2 --log-every 10)
"$MPITRON" train "${small[@]}" --out res
h5ls -r res/ckpt_10.h5 >ckpt_list.txt
grep -q 'buffers/layer3.0.bn2.running_var' ckpt_list.txt ||
  fail "the checkpoint holds no batch-norm running statistics"
mkdir -p resumed
cp res/trace.h5 res/ckpt_10.h5 resumed/
"$MPITRON" train "${small[@]}" --out resumed --resume resumed/ckpt_10.h5
"$MPITRON" compare res/trace.h5 resumed/trace.h5 --rtol 0 || fail "resumed run differs"
cmp <(trace_column res/trace.h5 val_loss) <(trace_column resumed/trace.h5 val_loss) ||
  fail "resumed validation losses differ (running statistics lost?)"

# Bad input, one clear line (on every rank).
tiny=(--steps 2 --batch-size 16 --eval-every 0)
mkdir -p broken
cp "$fmnist"/*.gz broken/
printf 'not gzip' >broken/t10k-labels-idx1-ubyte.gz
expect_error "t10k-labels-idx1-ubyte" "$MPITRON" train --config "$ALEX" --data broken "${tiny[@]}" --out e1
expect_error "images are 28x28 (784 pixels), the alexnet model takes 1024 inputs" \
  "$MPITRON" train --config "$ALEX" --set model.image=32 "${tiny[@]}" --out e2
expect_error "is not divisible by --tp 3: the channels split evenly over TP" \
  mpiexec -n 3 "$MPITRON" train --config "$ALEX" --tp 3 "${tiny[@]}" --batch-size 24 --out e3
expect_error "do not hold whole batch-norm groups of 8" \
  mpiexec -n 4 "$MPITRON" train --config "$RES" --dp 4 "${tiny[@]}" --out e4
expect_error "the resnet family runs at --tp 1" \
  mpiexec -n 2 "$MPITRON" train --config "$RES" --tp 2 "${tiny[@]}" --out e5
expect_error "it takes no --batches" "$MPITRON" eval --ckpt alex/ckpt_300.h5 --whole-split --batches 3
expect_error "model.image 4 is too small" "$MPITRON" train --config "$ALEX" --set model.image=4 "${tiny[@]}" --out e6
echo "cnn ok"
