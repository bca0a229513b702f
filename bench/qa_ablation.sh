#!/usr/bin/env bash
# What pretraining gives question answering: the same fine-tuning (configs/qa-finetune.toml on
# data/kjv-qa, the loss on the answer) from no pretraining, from plain next-token pretraining, from
# span-corruption pretraining and from span corruption on names (configs/qa-pretrain.toml, its
# objective set), each pretrained on data/kjv-qa/genealogies.txt (the verses that name a father,
# each fact restated son first and father first among them: io/get_kjv_qa.py --restate); and the
# component chosen, the restatements: span corruption on names over the verses alone
# (data/kjv-qa-verses, the same questions). Most facts are written father first and a
# left-to-right model stores them as a way from the father to the son, while the question starts
# from the son; the restatements write each fact both ways. Each over three seeds; prints the dev
# exact match per run, a table of means beside the most-common-answer baseline and, where a
# python imports torch, the cloze probe of each span pretraining (validate/qa_cloze_probe.py:
# does the model fill a father into a line of its text?), and draws OUT/qa_ablation.png.
# Runs -j at a time with -t threads each (on 2 cores, -j 1 -t 2 is the quickest: 23 minutes a
# pretraining, 12 of them, about 5 hours in all with the fine-tunings and probes).
# -c picks the pretraining conditions (default all four: next_token span_corruption
# name_span_corruption name_span_verses); no pretraining always runs. Runs already in OUT are kept.
# Usage: bench/qa_ablation.sh [-b BUILD] [-p PRETRAIN_STEPS] [-f FINETUNE_STEPS] [-s "SEEDS"]
#                             [-c "CONDITIONS"] [-j JOBS] [-t THREADS] [-o OUT]
set -euo pipefail
build=build pre_steps="" ft_steps="" seeds="1 2 3" jobs=2 threads=1 out=runs/qa_ablation
pretrainings=(next_token span_corruption name_span_corruption name_span_verses)
while getopts "b:p:f:s:c:j:t:o:" opt; do
  case $opt in
    b) build=$OPTARG ;;
    p) pre_steps=$OPTARG ;;
    f) ft_steps=$OPTARG ;;
    s) seeds=$OPTARG ;;
    c) read -ra pretrainings <<<"$OPTARG" ;;
    j) jobs=$OPTARG ;;
    t) threads=$OPTARG ;;
    o) out=$OPTARG ;;
    *) exit 1 ;;
  esac
done
for p in "${pretrainings[@]}"; do
  case $p in
    next_token | span_corruption | name_span_corruption | name_span_verses) ;;
    *)
      echo "error: -c takes next_token, span_corruption, name_span_corruption, name_span_verses (got $p)" >&2
      exit 1
      ;;
  esac
done
repo=$(cd "$(dirname "$0")/.." && pwd)
mpitron=$(realpath "$build")/mpitron
python=$("$repo/tests/find_python.sh" matplotlib numpy) || {
  echo "error: no python with matplotlib and numpy" >&2
  exit 1
}
"$repo/io/get_bible.sh" "$repo/data/kjv.txt" >/dev/null
qa=$repo/data/kjv-qa verses=$repo/data/kjv-qa-verses
# (again where a folder predates the restatements)
grep -qs "restatements among them" "$qa/summary.txt" ||
  "$python" "$repo/io/get_kjv_qa.py" "$repo/data/kjv.txt" "$qa" --restate
grep -qs "that name none" "$verses/summary.txt" ||
  "$python" "$repo/io/get_kjv_qa.py" "$repo/data/kjv.txt" "$verses"
steps_of() { sed -n 's/^steps *= *\([0-9]*\).*/\1/p' "$1"; }
pre_steps=${pre_steps:-$(steps_of "$repo/configs/qa-pretrain.toml")}
ft_steps=${ft_steps:-$(steps_of "$repo/configs/qa-finetune.toml")}
mkdir -p "$out"
export OMP_NUM_THREADS=$threads
wait_slot() { while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done; }
started=$(date +%s)

# pretraining condition -> its objective and text
objective_of() { [[ $1 == name_span_verses ]] && echo name_span_corruption || echo "$1"; }
text_of() { [[ $1 == name_span_verses ]] && echo "$verses" || echo "$qa"; }
for seed in $seeds; do
  for p in "${pretrainings[@]}"; do
    run=$out/pre_${p}_$seed
    [[ -e $run/ckpt_$pre_steps.h5 ]] && continue
    wait_slot
    echo "[$(date +%T)] pretraining: $p, seed $seed, $pre_steps steps"
    "$mpitron" train --config "$repo/configs/qa-pretrain.toml" --data "$(text_of "$p")/genealogies.txt" \
      --set train.objective="$(objective_of "$p")" --seed "$seed" --steps "$pre_steps" \
      --ckpt-every "$pre_steps" --log-every 200 --threads "$threads" --out "$run" \
      >"$run.log" 2>&1 &
  done
done
wait
for seed in $seeds; do
  for p in "${pretrainings[@]}"; do
    [[ -e $out/pre_${p}_$seed/ckpt_$pre_steps.h5 ]] ||
      { echo "error: pretraining $p seed $seed failed: $(tail -3 "$out/pre_${p}_$seed.log")" >&2; exit 1; }
  done
done

conditions=(none "${pretrainings[@]}")
init_of() { # condition seed
  [[ $1 == none ]] || echo "$out/pre_$1_$2/ckpt_$pre_steps.h5"
}
for seed in $seeds; do
  for c in "${conditions[@]}"; do
    run=$out/ft_${c}_$seed
    [[ -s $run/eval.txt ]] && continue
    wait_slot
    init=$(init_of "$c" "$seed")
    echo "[$(date +%T)] fine-tuning: from $c, seed $seed, $ft_steps steps"
    (
      rm -rf "$run"
      "$mpitron" train --config "$repo/configs/qa-finetune.toml" --data "$qa" --seed "$seed" \
        --steps "$ft_steps" --log-every 100 --threads "$threads" --out "$run" \
        ${init:+--init-from "$init"} >"$run.log" 2>&1
      "$mpitron" eval --ckpt "$run" >"$run/eval.tmp" && mv "$run/eval.tmp" "$run/eval.txt"
    ) &
  done
done
wait
echo "all runs: $(($(date +%s) - started)) s"
if torch_python=$("$repo/tests/find_python.sh" torch h5py 2>/dev/null); then
  for seed in $seeds; do
    for p in "${pretrainings[@]}"; do
      [[ $p == next_token ]] && continue
      probe=$out/pre_${p}_$seed/cloze.txt
      [[ -s $probe ]] || OMP_NUM_THREADS=1 "$torch_python" "$repo/validate/qa_cloze_probe.py" \
        "$out/pre_${p}_$seed/ckpt_$pre_steps.h5" "$(text_of "$p")" >"$probe"
      echo "cloze probe, $p, seed $seed: $(grep valid "$probe")"
    done
  done
fi

"$python" - "$out" "$seeds" "${conditions[@]}" <<'PY'
import re, sys, textwrap
import numpy as np
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
out, seeds, conds = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
names = {"none": "no pretraining", "next_token": "next-token pretraining",
         "span_corruption": "span-corruption pretraining",
         "name_span_corruption": "span corruption on names",
         "name_span_verses": "names, verses alone (no restatements)"}
em, base = {}, None
for c in conds:
    em[c] = []
    for s in seeds:
        text = open(f"{out}/ft_{c}_{s}/eval.txt").read()
        em[c].append(float(re.search(r"^exact_match ([0-9.]+)", text, re.M).group(1)))
        base = float(re.search(r"would score ([0-9.]+)", text).group(1))
print(f"\ndev exact match, seeds {' '.join(seeds)} (most common answer alone: {100 * base:.1f}%)")
width = max(len(names[c]) for c in conds) + 1
print(f"{'fine-tuned from':<{width}} {'mean':>7} {'min':>7} {'max':>7}   per seed")
for c in conds:
    v = np.array(em[c]) * 100
    print(f"{names[c]:<{width}} {v.mean():6.1f}% {v.min():6.1f}% {v.max():6.1f}%   "
          + " ".join(f"{x:.1f}" for x in v))
fig, ax = plt.subplots(figsize=(9, 4.2))
for k, c in enumerate(conds):
    v = np.array(em[c]) * 100
    ax.bar(k, v.mean(), color="C%d" % k, alpha=0.6)
    ax.scatter([k] * len(v), v, color="black", zorder=3, s=14)
ax.axhline(100 * base, color="gray", ls="--", lw=1, label="most common answer")
ax.set_xticks(range(len(conds)), [textwrap.fill(names[c], 18) for c in conds])
ax.set_ylabel("dev exact match (%)")
ax.set_title(f"Father-of questions on unseen people ({len(seeds)} seed{'s' if len(seeds) > 1 else ''}; dots: runs)")
ax.legend(loc="best", framealpha=0.9)  # where it hides no run
fig.tight_layout()
fig.savefig(f"{out}/qa_ablation.png", dpi=120)
print(f"wrote {out}/qa_ablation.png")
PY
