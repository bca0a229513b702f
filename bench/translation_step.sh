#!/usr/bin/env bash
# Step time of the translation preset (configs/mt-es-en.toml: a 4-block GPT on Spanish [SEP]
# English pairs, batch 32 x 128) three ways, run alternately (the order flips every round):
#   every row   another build's mpitron (-p, e.g. one from before the loss-rows head), no buckets
#   loss rows   this build, no length buckets: the LM head on the target rows alone
#   + buckets   this build with the preset's 16 length buckets: rows as long as the batch's longest
# Prints per way the median over rounds of the mean step time over steps 3.. (a bucketed batch's
# time depends on its bucket, so the mean, not the median step) and its ratio to the first way.
# Needs the preset's data: make mt-data (data/es-en and data/es-en/bpe10k.model).
# Usage: bench/translation_step.sh [-p other_build] [-r rounds] [-s steps] [-t threads] [-b build]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
rounds=3 steps=30 threads=2 build="$repo/build" prev=""
while getopts "p:r:s:t:b:h" opt; do
  case $opt in
    p) prev=$OPTARG ;;
    r) rounds=$OPTARG ;;
    s) steps=$OPTARG ;;
    t) threads=$OPTARG ;;
    b) build=$OPTARG ;;
    *) sed -n '2,11p' "$0"; exit 2 ;;
  esac
done
python=${PYTHON:-$("$repo/tests/find_python.sh" h5py || echo python3)}
data=$repo/data/es-en
[[ -s $data/bpe10k.model ]] || { echo "error: $data/bpe10k.model is missing (make mt-data)" >&2; exit 1; }
[[ -x $build/mpitron ]] || { echo "error: $build/mpitron is missing (make build)" >&2; exit 1; }
[[ -z $prev || -x $prev/mpitron ]] || { echo "error: $prev/mpitron is missing" >&2; exit 1; }
out=$(mktemp -d /tmp/translation_step.XXXXXX)
trap 'rm -rf "$out"' EXIT # the runs and their checkpoints
# The preset without its buckets, which a build from before them would not know.
grep -v '^length_buckets' "$repo/configs/mt-es-en.toml" >"$out/plain.toml"
ways=()
[[ -n $prev ]] && ways+=("every_row")
ways+=("loss_rows" "buckets")

run() {  # way round
  local bin=$build/mpitron config=$out/plain.toml
  [[ $1 == every_row ]] && bin=$prev/mpitron
  [[ $1 == buckets ]] && config=$repo/configs/mt-es-en.toml
  local args=(train --config "$config" --tokenizer "$data/bpe10k.model"
    --data "$data" --steps "$steps" --set train.eval_every=0 --set train.bleu_every=0
    --set train.ckpt_every=0 --set train.log_every=1000 --threads "$threads"
    --out "$out/$1_$2")
  "$bin" "${args[@]}" >/dev/null
  $python -c "
import sys, h5py
with h5py.File(sys.argv[1], 'r') as f:
    s = f['trace/step_s'][2:]
print(sum(s) / len(s))" "$out/$1_$2/trace.h5" >"$out/$1_$2.s"
}

for ((r = 0; r < rounds; r++)); do
  order=("${ways[@]}")
  if ((r % 2)); then
    order=()
    for ((i = ${#ways[@]} - 1; i >= 0; i--)); do order+=("${ways[i]}"); done
  fi
  for w in "${order[@]}"; do run "$w" "$r"; done
done
$python - "$out" "$rounds" "${ways[@]}" <<'PY'
import statistics, sys
out, rounds, ways = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
names = {"every_row": "every row (-p)", "loss_rows": "loss rows", "buckets": "loss rows + 16 buckets"}
med = {w: statistics.median(float(open(f"{out}/{w}_{r}.s").read()) for r in range(rounds))
       for w in ways}
print(f"{'way':<24} {'s/step':>8} {'ratio':>7}")
for w in ways:
    print(f"{names[w]:<24} {med[w]:8.3f} {med[w] / med[ways[0]]:7.2f}")
PY
