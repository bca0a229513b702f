#!/usr/bin/env bash
# What a new user tripped on (third round): the loss scale's 0 explained once, paths of the wrong
# kind named as such, --help without doubled entries and with each family's data, --set's expected
# type, cpu-staged's log naming what it really runs, the checkpoint interval in effect after a
# resume with --allow-changes, and a fresh start that would replace a trace refused.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)
small=(--config "$TINY" --data "$data" --batch-size 4 --seq-len 16 --eval-every 0 --log-every 1)

# train.loss_scale = 0: the help says what the README says (2^16 under fp16, else no scaling).
"$MPITRON" train --help-config >help_config.txt
grep -q "loss_scale.*0: 2^16 under --precision fp16, no scaling in fp32 and bf16" help_config.txt ||
  fail "--help-config does not say what loss_scale 0 means: $(grep loss_scale help_config.txt)"

# A path of the wrong kind says what was expected and what was found.
mkdir -p a_folder
echo "not a folder" >a_file
expect_error "config file 'a_folder' is a folder, not a file" "$MPITRON" train --config a_folder
expect_error "data file 'a_folder' is a folder, not a file" "$MPITRON" train "${small[@]}" --data a_folder --steps 1
expect_error "image data folder 'a_file' is a file, not a folder" \
  "$MPITRON" train --config "$REPO/configs/mlp-fmnist.toml" --data a_file --steps 1
expect_error "trace a_folder is a directory, not an HDF5 file" "$MPITRON" compare a_folder a_folder

# --help: the checkpoint listed once, not as REQUIRED twice; --offload's choices once; --data by
# family; a missing checkpoint still refused in one line.
for cmd in eval generate info export; do
  "$MPITRON" $cmd --help >help_$cmd.txt
  [[ $(grep -cE -- "(ckpt|file) TEXT REQUIRED" help_$cmd.txt) == 0 ]] ||
    fail "$cmd --help lists its checkpoint as REQUIRED: $(grep REQUIRED help_$cmd.txt)"
  [[ $(grep -c -- "--ckpt also takes it" help_$cmd.txt) == 1 ]] || fail "$cmd --help lists its checkpoint $(grep -c -- '--ckpt' help_$cmd.txt) times"
done
expect_error "mpitron eval needs a checkpoint" "$MPITRON" eval
expect_error "mpitron info needs a trace or checkpoint" "$MPITRON" info
"$MPITRON" train --help >help_train.txt
[[ $(grep -- "--offload" help_train.txt | grep -o "optimizer,master" | wc -l) == 1 ]] ||
  fail "--offload lists its choices more than once: $(grep -A1 -- '--offload' help_train.txt)"
grep -q "{none" help_train.txt && fail "a choice list is printed beside its own help text: $(grep '{none' help_train.txt)"
for family in gpt bert mlp alexnet resnet; do
  tr '\n' ' ' <help_train.txt | grep -q -- "--data TEXT .*$family" || fail "--data's help does not name $family's data"
done
expect_error "'train.steps' has the wrong type: an integer is expected, not a string" \
  "$MPITRON" train "${small[@]}" --set train.steps=lots
expect_error "'train.lr' has the wrong type: a number is expected, not a boolean" \
  "$MPITRON" train "${small[@]}" --set train.lr=true

# cpu-staged runs the CPU's products on the CPU's threads: the log says so, not cuBLAS.
"$MPITRON" train "${small[@]}" --steps 1 --device cpu-staged --out staged >staged.log 2>&1 ||
  fail "cpu-staged run failed: $(tail -n 3 staged.log)"
grep -q "cpu-staged, gemm [a-z]* on [0-9]* threads\? per rank" staged.log ||
  fail "cpu-staged's log does not name its gemm library and threads: $(grep gemm staged.log)"
grep -q "cublas" staged.log && fail "cpu-staged's log names cuBLAS"

# After a resume with --allow-changes, the log gives the checkpoint interval in effect.
"$MPITRON" train "${small[@]}" --steps 4 --ckpt-every 2 --out interval >interval1.log 2>&1
grep -q "checkpoints in interval: every 2 steps and at the end" interval1.log || fail "no checkpoint interval line"
"$MPITRON" train "${small[@]}" --steps 8 --ckpt-every 3 --out interval --resume auto --allow-changes >interval2.log 2>&1
grep -q "checkpoints in interval: every 3 steps and at the end" interval2.log ||
  fail "the log does not give the new checkpoint interval: $(grep checkpoints interval2.log)"
[[ -e interval/ckpt_6.h5 ]] || fail "no checkpoint at step 6 (every 3)"

# A run stopped before its first checkpoint keeps its trace: a restart into the folder is refused.
"$MPITRON" train "${small[@]}" --steps 100000 --trace-flush-every 1 --out stopped >stopped.log 2>&1 &
pid=$!
for _ in $(seq 600); do grep -qs "step      3/" stopped.log && break; sleep 0.1; done
kill -9 $pid || true
wait $pid || true
ls stopped/ckpt_*.h5 >/dev/null 2>&1 && fail "the run wrote a checkpoint before it was killed"
cp stopped/trace.h5 before.h5
expect_error "stopped/trace.h5 holds the trace of steps 1-[0-9]*, but stopped holds no checkpoint" \
  "$MPITRON" train "${small[@]}" --steps 10 --out stopped --resume auto
cmp before.h5 stopped/trace.h5 || fail "the refused start changed the trace"
echo "everyday 3 ok"
