#!/usr/bin/env bash
# What a new user trips on: Ctrl-C stops with a checkpoint, resuming with changed settings is
# refused unless asked and each run segment is recorded, dp is inferred from the ranks, --set
# overrides config keys, eval defaults to the trainer's validation, failed starts leave no run
# folder, CLI mistakes get suggestions, long prompts are announced, a changed schedule and the end of
# a run are reported, old flag spellings still work and a run folder stands for its checkpoint.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)
small=(--config "$TINY" --data "$data" --batch-size 8 --seq-len 16 --log-every 1)
attr() {
  "$PYTHON" -c "
import sys, h5py
with h5py.File(sys.argv[1], 'r') as f:
    g = f[sys.argv[2]] if len(sys.argv) > 3 else f
    v = g.attrs[sys.argv[-1]]
    print(v.decode() if isinstance(v, bytes) else v)" "$@"
}

# Ctrl-C on a single process: a checkpoint at the next step boundary and exit 3.
"$MPITRON" train "${small[@]}" --steps 100000 --out interrupted >interrupted.log 2>&1 &
pid=$!
for _ in $(seq 600); do grep -qs "step      3/" interrupted.log && break; sleep 0.1; done
kill -INT $pid
rc=0
wait $pid || rc=$?
[[ $rc == 3 ]] || fail "Ctrl-C should stop with exit code 3, got $rc: $(tail -n 3 interrupted.log)"
ls interrupted/ckpt_*.h5 >/dev/null 2>&1 || fail "Ctrl-C left no checkpoint"
grep -q "Ctrl-C (SIGINT) received: stopped after step" interrupted.log || fail "no stop message"

# Resuming with another learning rate or more steps: refused, then allowed and recorded.
"$MPITRON" train "${small[@]}" --steps 4 --ckpt-every 2 --out run >/dev/null
expect_error "would change the run's settings (train.lr 0.003 -> 0.001" \
  "$MPITRON" train "${small[@]}" --steps 4 --lr 1e-3 --out run --resume run/ckpt_2.h5
expect_error "train.steps 4 -> 6" "$MPITRON" train "${small[@]}" --steps 6 --out run --resume auto
"$MPITRON" train "${small[@]}" --steps 6 --lr 1e-3 --allow-changes --out run \
  --resume run/ckpt_2.h5 >changed.log 2>&1
grep -q "the learning rate at step 3 is .* under the new schedule, .* under the checkpoint's" \
  changed.log || fail "a changed schedule moves the learning rate without a word: $(cat changed.log)"
grep -q "^.*done: steps 3-6 in .*, last loss .*, checkpoint run/ckpt_6.h5" changed.log ||
  fail "training ended without a summary line: $(tail -n 2 changed.log)"
[[ $(attr run/trace.h5 segments/0 x first_step) == 1 && $(attr run/trace.h5 segments/1 x first_step) == 3 ]] ||
  fail "the trace does not record where each segment starts"
[[ $(attr run/trace.h5 segments/0 x train.lr) == 0.003 && $(attr run/trace.h5 segments/1 x train.lr) == 0.001 ]] ||
  fail "the trace does not keep each segment's learning rate"
cmp <(trace_column run/trace.h5 step) <(printf '%s\n' 1.0 2.0 3.0 4.0 5.0 6.0) ||
  fail "the resumed trace has a gap or a repeated step"

# dp from the ranks; --set for model keys.
# (without the tests' OMP_NUM_THREADS=1: the default thread count is checked below)
env -u OMP_NUM_THREADS mpiexec -n 2 "$MPITRON" train "${small[@]}" --steps 1 --set model.n_layer=2 --set train.lr=2e-3 \
  --out inferred >inferred.log 2>&1 || fail "dp was not inferred: $(cat inferred.log)"
[[ $(attr inferred/trace.h5 layout.dp) == 2 ]] || fail "dp is not ranks / (tp x pp)"
grep -q "dp=2 (ranks / tp·pp)" inferred.log || fail "the layout line does not say dp was inferred"
# Threads by default: the node's cores shared by its ranks, said in the layout line.
threads_line=$(grep -oE "on [0-9]+ threads? per rank \([0-9]+ cores? for 2 ranks on the node\)" inferred.log) ||
  fail "the layout line does not say how many threads and why: $(head -n 1 inferred.log)"
read -r n c <<<"$(echo "$threads_line" | sed -E 's/on ([0-9]+) .*\(([0-9]+) core.*/\1 \2/')"
[[ $n == $(((c / 2) > 1 ? c / 2 : 1)) ]] || fail "$n threads per rank for 2 ranks on $c cores"
[[ $(attr inferred/trace.h5 model.n_layer) == 2 && $(attr inferred/trace.h5 train.lr) == 0.002 ]] ||
  fail "--set did not reach the model and the optimizer"
expect_error "unknown key 'model.n_lyer'" "$MPITRON" train "${small[@]}" --set model.n_lyer=2
expect_error "is not section.key=value" "$MPITRON" train "${small[@]}" --set n_layer
expect_error "which tp 2 x pp 1 does not divide" mpiexec -n 3 "$MPITRON" train "${small[@]}" --tp 2
"$MPITRON" train --help-config >help_config.txt  # whole: `| grep -q` would close the pipe early
grep -q "^  n_layer .* transformer blocks" help_config.txt || fail "--help-config lacks n_layer"
[[ $(awk <help_config.txt '/^  [a-z_0-9]+ +[^ ]+ +/ {
  match($0, /^  [a-z_0-9]+ +[^ ]+ +/); print RLENGTH}' | sort -u | wc -l) == 1 ]] ||
  fail "--help-config's meanings do not start in one column"

# eval defaults to what the trainer's validation used.
"$MPITRON" train "${small[@]}" --steps 2 --eval-batches 3 --out evaluated >/dev/null
val=$(trace_column evaluated/trace.h5 val_loss | tail -n 1)
"$MPITRON" eval --ckpt evaluated/ckpt_2.h5 >eval.txt
grep -q "3 batches of 8x16 from $data, seed 1337" eval.txt || fail "eval does not say what it used: $(cat eval.txt)"
"$PYTHON" -c "
import sys
a, b = float(sys.argv[1]), float(sys.argv[2])
assert abs(a - b) <= 1e-5 * abs(a), (a, b)" "$val" "$(awk '/^val_loss/ {print $2}' eval.txt)" ||
  fail "eval's loss differs from the trainer's validation loss $val: $(cat eval.txt)"

# A start that fails leaves no run folder behind.
expect_error "does not exist" "$MPITRON" train "${small[@]}" --out never --resume nothing.h5
[[ ! -e never ]] || fail "a failed --resume left the run folder behind"
mkdir -p bin
printf '#!/bin/sh\necho "sbatch: error: no Slurm configuration" >&2\nexit 1\n' >bin/sbatch
chmod +x bin/sbatch
if PATH="$WORK/bin:$PATH" make -s -C "$REPO" -f Makefile.slurm submit RUN="$WORK/unsubmitted" \
  >submit.log 2>&1; then
  fail "make submit succeeded with a failing sbatch"
fi
[[ ! -e unsubmitted ]] || fail "a failed sbatch left its run folder behind: $(cat submit.log)"

# CLI mistakes: suggestions, presets, one exit code.
expect_error "'trian' is not a command (did you mean train?)" "$MPITRON" trian
expect_error "unknown option --step for mpitron train (did you mean --steps?)" \
  "$MPITRON" train "${small[@]}" --step 10
expect_error "--config is required: presets: .*gpt-tiny.toml" "$MPITRON" train --steps 3
rc=0
"$MPITRON" train "${small[@]}" --step 10 2>/dev/null || rc=$?
[[ $rc == 1 ]] || fail "a parse error should exit 1, got $rc"

# A prompt longer than the block size is announced.
long=$(printf 'x%.0s' $(seq 80))
"$MPITRON" generate --ckpt evaluated/ckpt_2.h5 --prompt "$long" --new-tokens 2 >/dev/null 2>gen.err
grep -q "the prompt has 80 bytes and the model sees at most 64" gen.err || fail "no note on a cropped prompt"

# Old spellings still work, with a note; a run folder stands for its latest checkpoint.
"$MPITRON" generate evaluated --prompt "In" --tokens 2 >/dev/null 2>old.err ||
  fail "generate's old --tokens spelling or a run folder was refused: $(cat old.err)"
grep -q "note: generate's --tokens is now --new-tokens" old.err || fail "no note for --tokens"
"$MPITRON" train "${small[@]}" --steps 1 --warmup 1 --out warm >/dev/null 2>warm.err ||
  fail "train's old --warmup spelling was refused: $(cat warm.err)"
grep -q "note: --warmup is now --warmup-steps" warm.err || fail "no note for --warmup"
[[ $(attr warm/trace.h5 train.warmup_steps) == 1 ]] || fail "--warmup did not set the warm-up"
"$MPITRON" eval evaluated >folder.txt || fail "eval of a run folder failed"
cmp folder.txt eval.txt || fail "eval of the run folder differs from eval of its latest checkpoint"
"$MPITRON" info evaluated >info_run.txt
grep -q "ckpt_2.h5" info_run.txt || fail "info of a run folder does not read its latest checkpoint"
expect_error "is a folder without checkpoints" "$MPITRON" export --ckpt warm/.. --out nowhere
# batch takes a config's batch and sequence length, and says what it wrote.
"$MPITRON" batch --config "$TINY" --data "$data" --steps 2 --out batch.h5 >batch.txt
grep -q "^batch.h5: /tokens (2, 32, 65) int32, steps 1-2 of 32x64 tokens (+1 target), seed 1337" \
  batch.txt || fail "batch did not take the config's batch or say what it wrote: $(cat batch.txt)"
echo "everyday ok"
