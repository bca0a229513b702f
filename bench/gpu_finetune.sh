#!/usr/bin/env bash
# Fine-tuning GPT-2 Large and XL within a device-memory cap on one GPU, at the shapes of
# configs/gpt2-large-finetune.toml and gpt2-xl-finetune.toml (global batch 64 x 1024): bf16,
# recompute, 8-bit AdamW. Per preset: `mpitron plan` with those flags under the cap and, where they
# do not fit, the first setting the plan names (XL: the optimizer state and the master weights in
# host memory); then -s steps on one fixed batch of random tokens under
# --max-device-memory (train.fixed_batch: the loss must fall), and for the speed ratio forward and
# backward alone (the trace's busy time, no recompute) at the largest micro-batch the plan fits
# under the cap. Prints per preset the flags, micro-batch rows, the plan's and the measured device
# peak, the host's peak resident set, the loss at the first and last step, tokens/s of the whole
# step and of plain forward and backward, their ratio, and the step's seconds outside forward and
# backward (gradient sync, norm, the update: on the host when offloaded). Random initialisation
# (no download): the computation and memory are a fine-tuning run's, only the starting weights
# differ.
# Needs a CUDA build of mpitron, a GPU, and a python (PYTHON, default python3) with h5py.
# Usage: bench/gpu_finetune.sh [-b build_dir] [-m preset[,preset...]] [-C cap] [-s steps]
#                              [-d device] [-S seq] [-B batch] [-o out_dir]
#   defaults: -m gpt2-large-finetune,gpt2-xl-finetune -C 11GiB -s 20 -d cuda, -S and -B the
#   preset's. `-d cpu-staged -m gpt-tiny -C 9MiB -S 32 -B 8 -s 3` walks the same way on any
#   machine in seconds (tests/e2e/bench_gpu_walks.sh).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
build="$repo/build" presets=gpt2-large-finetune,gpt2-xl-finetune cap=11GiB steps=20 device=cuda
seq="" batch="" out=""
while getopts "b:m:C:s:d:S:B:o:h" opt; do
  case $opt in
    b) build=$OPTARG ;;
    m) presets=$OPTARG ;;
    C) cap=$OPTARG ;;
    s) steps=$OPTARG ;;
    d) device=$OPTARG ;;
    S) seq=$OPTARG ;;
    B) batch=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,20p' "$0"; exit 2 ;;
  esac
done
python=${PYTHON:-python3}
mpitron="$build/mpitron"
[[ $steps =~ ^[1-9][0-9]*$ && $steps -ge 2 ]] ||
  { echo "error: -s takes an integer >= 2 (the loss must fall), not '$steps'" >&2; exit 2; }
for n in "$seq" "$batch"; do
  [[ -z $n || $n =~ ^[1-9][0-9]*$ ]] ||
    { echo "error: -S and -B take a positive integer, not '$n'" >&2; exit 2; }
done
[[ -x $mpitron ]] || { echo "error: $mpitron is missing: build mpitron first (-b)" >&2; exit 1; }
if ! "$python" -c "import h5py, numpy" 2>/dev/null; then
  echo "error: $python cannot import h5py and numpy (set PYTHON): they write the token file" \
    "and read the traces" >&2
  exit 1
fi
if [[ $device == cuda ]] && ! "$mpitron" devices 2>&1 | grep -q "^cuda:0 "; then
  echo "error: no GPU: $mpitron devices says '$("$mpitron" devices 2>&1 | head -n 1)'" >&2
  exit 1
fi
out=${out:-$repo/runs/bench/gpu_finetune}
mkdir -p "$out"
out=$(cd "$out" && pwd)
results="$out/results.jsonl"
: >"$results"

# The value of [section] key in a preset (DEFAULT where it has none).
preset_value() {
  "$python" - "$@" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    section = tomllib.load(f).get(sys.argv[2], {})
print(section.get(sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None))
EOF
}
# fitting_flags PLAN_OUTPUT: the first setting the plan names that fits ("" for "as given").
fitting_flags() {
  sed -n 's/^  fits: \(.*\) ([^()]*)$/\1/p' "$1" | head -n 1 | sed 's/^as given$//'
}

echo "$("$mpitron" devices 2>&1 | head -n 1); cap $cap; $steps steps per preset; out $out"
printf '%-22s %-50s %5s %9s %9s %9s %15s %10s %10s %6s %8s\n' preset flags rows plan peak \
  host_rss "loss first>last" tok/s fwd+bwd ratio rest_s
for preset in ${presets//,/ }; do
  config="$repo/configs/$preset.toml"
  [[ -f $config ]] || { echo "error: no preset $config" >&2; exit 1; }
  vocab=$(preset_value "$config" model vocab_size)
  b=${batch:-$(preset_value "$config" train batch_size)}
  t=${seq:-$(preset_value "$config" train seq_len)}
  tokens="$out/random_tokens_$vocab.h5"
  [[ -s $tokens ]] || "$python" "$here/random_tokens.py" "$tokens" "$vocab" $((1 << 20)) \
    "random tokens (bench/gpu_finetune.sh)"
  base=(--config "$config" --device "$device" --precision bf16 --batch-size "$b" --seq-len "$t"
    --optimizer adamw8bit --max-device-memory "$cap")
  run=(--data "$tokens" --eval-every 0 --log-every 1 --set train.fixed_batch=1)

  # The fine-tuning step: the flags above with recompute, or what the plan says fits.
  "$mpitron" plan "${base[@]}" --recompute block >"$out/$preset.plan.txt" || true
  if grep -q "^fits --max-device-memory" "$out/$preset.plan.txt"; then
    extra=""
  elif grep -q "^  fits: " "$out/$preset.plan.txt"; then
    extra=$(fitting_flags "$out/$preset.plan.txt")
  else
    echo "$preset: nothing fits $cap: $(grep -m 1 'does not fit' "$out/$preset.plan.txt")"
    continue
  fi
  read -ra extra_flags <<<"$extra"
  flags=(--recompute block "${extra_flags[@]}")
  micro=$(preset_value "$config" train micro_batches 1)
  for ((i = 0; i + 1 < ${#extra_flags[@]}; i++)); do
    [[ ${extra_flags[i]} != --micro-batches ]] || micro=${extra_flags[i + 1]}
  done
  dir="$out/$preset" log="$out/$preset.log"
  rm -rf "$dir"
  if ! "$mpitron" train "${base[@]}" "${run[@]}" "${flags[@]}" --steps "$steps" --out "$dir" \
    >"$log" 2>&1; then
    why=$(grep -m 1 'error' "$log" || tail -n 1 "$log")
    echo "$preset: the fine-tuning run failed (log $log): $why"
    continue
  fi
  rm -f "$dir"/ckpt_*.h5

  # Plain forward and backward: no recompute, the fewest micro-batches the plan fits.
  plain_mb=""
  for ((mb = 1; mb <= b; mb *= 2)); do
    ((b % mb == 0)) || continue
    if "$mpitron" plan "${base[@]}" "${extra_flags[@]}" --micro-batches "$mb" \
      >"$out/$preset.plain_plan.txt" 2>&1; then
      plain_mb=$mb
      break
    fi
  done
  plain_dir="$out/${preset}_plain" plain_log="$out/${preset}_plain.log"
  rm -rf "$plain_dir"
  if [[ -n $plain_mb ]] && "$mpitron" train "${base[@]}" "${run[@]}" "${extra_flags[@]}" \
    --micro-batches "$plain_mb" --steps 3 --out "$plain_dir" >"$plain_log" 2>&1; then
    rm -f "$plain_dir"/ckpt_*.h5
  else
    plain_dir=""
  fi

  "$python" - "$preset" "$dir/trace.h5" "$log" "${plain_dir:+$plain_dir/trace.h5}" "$b" "$t" \
    "${flags[*]}" $((b / micro)) "${plain_mb:-0}" >>"$results" <<'EOF'
import json, re, statistics, sys
import h5py
preset, trace, log, plain, b, t, flags, rows, plain_mb = sys.argv[1:10]
b, t, rows, plain_mb = int(b), int(t), int(rows), int(plain_mb)
with h5py.File(trace, "r") as f:
    loss = f["trace/loss"][:]
    tps = statistics.median(f["trace/tokens_per_s"][1:])
    # Outside forward and backward: gradient sync, norm, the update (on the host if offloaded).
    rest = statistics.median(f["trace/step_s"][1:] - f["trace/rank_busy_us"][1:, 0] / 1e6)
    peak = int(f["trace/peak_mem_bytes"][:].max())
    planned = int(f["trace/rank_planned_mem_bytes"][:].max())
text = open(log).read()
rss = re.search(r"host memory: peak resident set ([0-9.]+ [KMGT]?i?B)", text)
d = {"preset": preset, "flags": flags, "batch": b, "seq": t, "micro_batch_rows": rows,
     "first_loss": float(loss[0]), "last_loss": float(loss[-1]),
     "loss_falls": bool(loss[-1] < loss[0]), "tokens_per_s": round(float(tps), 1),
     "peak_mem_bytes": peak, "planned_mem_bytes": planned, "outside_fwd_bwd_s": round(rest, 4),
     "host_rss": rss.group(1) if rss else None}
if plain:
    with h5py.File(plain, "r") as f:
        busy = statistics.median(f["trace/rank_busy_us"][1:, 0]) / 1e6
    d["plain_micro_batch_rows"] = b // plain_mb
    d["plain_tokens_per_s"] = round(b * t / busy, 1)
    d["ratio"] = round(d["tokens_per_s"] / d["plain_tokens_per_s"], 3)
print(json.dumps(d))
EOF
  "$python" - "$(tail -n 1 "$results")" <<'EOF'
import json, sys
d = json.loads(sys.argv[1])
gib = lambda x: f"{x / 2**30:.2f}G"
print(f"{d['preset']:<22} {d['flags']:<50} {d['micro_batch_rows']:>5} "
      f"{gib(d['planned_mem_bytes']):>9} {gib(d['peak_mem_bytes']):>9} {d['host_rss'] or '-':>9} "
      f"{d['first_loss']:>7.3f}>{d['last_loss']:<7.3f} {d['tokens_per_s']:>10.0f} "
      f"{d.get('plain_tokens_per_s', float('nan')):>10.0f} {d.get('ratio', float('nan')):>6.2f} "
      f"{d['outside_fwd_bwd_s']:>8.3f}")
if not d["loss_falls"]:
    print(f"  {d['preset']}: the loss did not fall on its fixed batch")
if "ratio" not in d:
    print(f"  {d['preset']}: plain forward and backward (no recompute) fits the cap at no "
          "micro-batch count, or its run failed: no reference for the ratio")
EOF
done
echo "results: $results"
