#!/usr/bin/env bash
# GPT-2 124M training steps on one GPU: `mpitron train --device cuda` against PyTorch on the same
# GPU (bench/torch_gpu_gpt2.py, eager and torch.compile), seq 1024, random tokens, run alternately
# (the order flips every round) so that noise hits all alike; prints per implementation and batch
# the median over rounds of each run's median ms/step, tokens/s, model TFLOP/s, MFU and peak
# memory, with tokens/s and memory as ratios to torch-compile.
# mpitron gets --precision only where `mpitron train --help` lists it; else it runs fp32.
# Needs a CUDA build of mpitron (MPITRON_CUDA=ON), a GPU, and a python (PYTHON, default python3)
# with CUDA torch and h5py. Everything it writes goes under -o (default runs/bench/gpu_gpt2).
# Usage: bench/gpu_gpt2.sh [-b build_dir] [-r rounds] [-B batch[,batch...]] [-p bf16|fp32]
#                          [-P peak_tflops|matmul] [-s steps] [-w warmup] [-o out_dir]
#   -B: default the largest of 64 32 16 8 4 that fits torch eager (--largest-batch), for all
#   -P: the TFLOP/s MFU divides by (default 989, H100 SXM dense bf16); matmul: an 8192^3 bf16
#       torch.matmul's measured rate.  -s/-w: timed and warm-up steps per run (default 20, 5).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
rounds=3 build="$repo/build" batches="" precision=bf16 peak=989 steps=20 warmup=5 out=""
while getopts "b:r:B:p:P:s:w:o:h" opt; do
  case $opt in
    b) build=$OPTARG ;;
    r) rounds=$OPTARG ;;
    B) batches=$OPTARG ;;
    p) precision=$OPTARG ;;
    P) peak=$OPTARG ;;
    s) steps=$OPTARG ;;
    w) warmup=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,14p' "$0"; exit 2 ;;
  esac
done
python=${PYTHON:-python3}
config="$repo/configs/gpt2-124m.toml"
seq=1024
mpitron="$build/mpitron"

for n in "$rounds" "$steps"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] ||
    { echo "error: -r and -s take a positive integer, not '$n'" >&2; exit 2; }
done
[[ $warmup =~ ^[0-9]+$ ]] || { echo "error: -w takes an integer >= 0, not '$warmup'" >&2; exit 2; }
[[ $precision == bf16 || $precision == fp32 ]] ||
  { echo "error: -p takes bf16 or fp32, not '$precision'" >&2; exit 2; }
[[ $peak == matmul || $peak =~ ^[0-9]+(\.[0-9]+)?$ ]] ||
  { echo "error: -P takes TFLOP/s (a number) or 'matmul', not '$peak'" >&2; exit 2; }
[[ -z $batches || $batches =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
  { echo "error: -B takes batch sizes separated by commas (16,32), not '$batches'" >&2; exit 2; }

if [[ ! -x $mpitron ]]; then
  echo "error: $mpitron is missing: cmake -S $repo -B $build -DMPITRON_CUDA=ON &&" \
    "cmake --build $build --target mpitron" >&2
  exit 1
fi
devices=$("$mpitron" devices 2>&1) ||
  { echo "error: $mpitron devices failed: $(tail -n 1 <<<"$devices")" >&2; exit 1; }
if grep -q "built without CUDA" <<<"$devices"; then
  echo "error: $mpitron was built without CUDA (reconfigure with -DMPITRON_CUDA=ON where nvcc" \
    "is)" >&2
  exit 1
fi
if ! grep -q "^cuda:0 " <<<"$devices"; then
  echo "error: no GPU: $mpitron devices says '$(head -n 1 <<<"$devices")'" >&2
  exit 1
fi
if ! command -v "$python" >/dev/null; then
  echo "error: no $python (set PYTHON to a python with CUDA torch and h5py)" >&2
  exit 1
fi
if ! "$python" -c "import torch" 2>/dev/null; then
  echo "error: $python cannot import torch (install PyTorch with CUDA, or set PYTHON)" >&2
  exit 1
fi
if ! "$python" -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
  echo "error: $python's torch $("$python" -c 'import torch; print(torch.__version__)') sees no" \
    "CUDA device" >&2
  exit 1
fi
if ! "$python" -c "import h5py, numpy" 2>/dev/null; then
  echo "error: $python cannot import h5py (pip install h5py): it writes the token file and reads" \
    "mpitron's trace.h5" >&2
  exit 1
fi

out=${out:-$repo/runs/bench/gpu_gpt2}
mkdir -p "$out"
out=$(cd "$out" && pwd)
results="$out/results.jsonl"
: >"$results"
# torch.compile's caches with the rest, not in /tmp.
export TORCHINDUCTOR_CACHE_DIR="$out/torchinductor" TRITON_CACHE_DIR="$out/triton"

read -r n_layer n_embd vocab block < <(
  "$python" - "$config" <<'EOF'
import re, sys
model, section = {}, ""
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if m := re.fullmatch(r"\[(.+)\]", line):
        section = m.group(1).strip()
    elif section == "model" and (m := re.fullmatch(r"(\w+)\s*=\s*(-?\d+)", line)):
        model[m.group(1)] = m.group(2)
print(*(model[k] for k in ("n_layer", "n_embd", "vocab_size", "block_size")))
EOF
)

mflags=(--precision "$precision") mprec=$precision

echo "$(head -n 1 <<<"$devices"); torch $("$python" -c 'import torch; print(torch.__version__)')"
echo "gpt2-124m, seq $seq, $rounds rounds of $steps timed steps after $warmup warm-up;" \
  "torch $precision, mpitron $mprec; out $out"

if [[ $peak == matmul ]]; then
  if ! line=$("$python" "$here/torch_gpu_gpt2.py" --peak-from-matmul --steps 0 \
    2>"$out/matmul.log" | tail -n 1) || [[ -z $line ]]; then
    echo "error: the bf16 matmul failed: $(tail -n 1 "$out/matmul.log")" >&2
    exit 1
  fi
  peak=$("$python" -c 'import json, sys; print(json.loads(sys.argv[1])["peak_tflops"])' "$line")
  peak_from="what an 8192^3 bf16 torch.matmul reaches on this GPU (-P matmul)"
  echo "bf16 matmul 8192^3: $peak TFLOP/s, the peak for MFU"
elif [[ $peak == 989 ]]; then
  peak_from="the H100 SXM's dense bf16 figure (-P to change)"
else
  peak_from="given with -P"
fi

torch_common=(--config "$config" --seq "$seq" --precision "$precision" --peak-tflops "$peak")
if [[ -z $batches ]]; then
  echo "finding the largest batch torch eager ($precision) fits ..."
  if ! line=$("$python" "$here/torch_gpu_gpt2.py" "${torch_common[@]}" --mode eager \
    --largest-batch --steps 2 --warmup 1 2>"$out/largest_batch.log" | tail -n 1); then
    echo "error: torch found no batch that fits: $(tail -n 1 "$out/largest_batch.log")" >&2
    exit 1
  fi
  batches=$("$python" -c 'import json, sys; print(json.loads(sys.argv[1])["batch"])' "$line")
  echo "largest batch: $batches"
fi

# Random tokens (uniform over the vocabulary, fixed seed) as an mpitron token file.
tokens="$out/random_tokens.h5"
"$python" "$here/random_tokens.py" "$tokens" "$vocab" $((1 << 20)) "random tokens (bench/gpu_gpt2.sh)"

declare -A failed=()
show() {  # one JSON result line -> one progress line
  "$python" -c 'import json, sys; d = json.loads(sys.argv[1])
print("  {impl:<14} {ms_per_step:>9.1f} ms/step {tokens_per_s:>10.0f} tok/s".format(**d))' "$1"
}
fail() {  # impl, batch, log: note the error once, show its one line
  local msg
  msg=$(grep -m 1 -E '(^|\] )error: ' "$3" || tail -n 1 "$3")
  failed[$1-$2]=1
  echo "  $1 failed (log $3): $msg"
  "$python" -c 'import json, sys; print(json.dumps({"impl": sys.argv[1], "batch": int(sys.argv[2]),
"error": sys.argv[3]}))' "$1" "$2" "$msg" >>"$results"
}

run_one() {  # impl, batch, round
  local impl=$1 b=$2 r=$3 dir log line
  [[ -z ${failed[$impl-$b]:-} ]] || return 0
  if [[ $impl == mpitron ]]; then
    dir="$out/mpitron_b${b}_r$r" log="$out/mpitron_b${b}_r$r.log"
    rm -rf "$dir"
    if ! "$mpitron" train --config "$config" --device cuda --data "$tokens" --batch-size "$b" \
      --seq-len "$seq" --steps $((warmup + steps)) --eval-every 0 --eval-batches 1 --log-every 1 \
      --ckpt-every 0 "${mflags[@]}" --out "$dir" >"$log" 2>&1; then
      fail "$impl" "$b" "$log"
      return 0
    fi
    rm -f "$dir"/ckpt_*.h5  # the 124M model and its moments: 1.5 GB a run, not needed
    if ! line=$("$python" - "$dir/trace.h5" "$warmup" "$b" "$seq" "$mprec" "$peak" \
      "$n_layer" "$n_embd" "$vocab" "$block" 2>>"$log" <<'EOF'
import json, statistics, sys
import h5py
path, prec, peak = sys.argv[1], sys.argv[5], float(sys.argv[6])
warm, b, t, layers, c, vocab, block = map(int, sys.argv[2:5] + sys.argv[7:])
with h5py.File(path, "r") as f:
    step_s = f["trace/step_s"][warm:]
    tokens_per_s = f["trace/tokens_per_s"][warm:]
    peak_mem = int(f["trace/peak_mem_bytes"][:].max())
params = vocab * c + block * c + layers * (12 * c * c + 13 * c) + 2 * c  # tied head, with wpe
flops = 6.0 * (params - block * c) * b * t + 6.0 * layers * b * t * t * c
ms = statistics.median(step_s) * 1e3
tflops = flops / (ms / 1e3) / 1e12
print(json.dumps({"impl": "mpitron", "batch": b, "seq": t, "precision": prec,
                  "ms_per_step": round(ms, 3),
                  "tokens_per_s": round(statistics.median(tokens_per_s), 1),
                  "tflops": round(tflops, 3), "mfu": round(tflops / peak, 4),
                  "peak_mem_bytes": peak_mem, "steps": len(step_s)}))
EOF
    ); then
      fail "$impl" "$b" "$log"
      return 0
    fi
  else
    log="$out/${impl}_b${b}_r$r.log"
    if ! line=$("$python" "$here/torch_gpu_gpt2.py" "${torch_common[@]}" --mode "${impl#torch-}" \
      --batch "$b" --steps "$steps" --warmup "$warmup" 2>"$log" | tail -n 1) || [[ -z $line ]]; then
      fail "$impl" "$b" "$log"
      return 0
    fi
  fi
  echo "$line" | "$python" -c 'import json, sys; d = json.loads(sys.stdin.read())
d["round"] = int(sys.argv[1]); print(json.dumps(d))' "$r" >>"$results"
  show "$line"
}

for b in ${batches//,/ }; do
  echo "batch $b:"
  for ((r = 1; r <= rounds; r++)); do
    if ((r % 2)); then order=(mpitron torch-eager torch-compile); else
      order=(torch-compile torch-eager mpitron); fi
    for impl in "${order[@]}"; do run_one "$impl" "$b" "$r"; done
  done
done

"$python" - "$results" "$rounds" "$steps" "$warmup" "$seq" "$peak" "$peak_from" "$mprec" \
  "$precision" <<'EOF' | tee "$out/table.txt"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rounds, steps, warmup, seq, peak, peak_from, mprec, tprec = sys.argv[2:]

def med(impl, b, key):
    v = [r[key] for r in rows if r["impl"] == impl and r["batch"] == b and "error" not in r]
    return statistics.median(v) if v else None

def cell(v, width, spec, scale=1.0, unit=""):
    return f"{'-':>{width}}" if v is None else f"{format(v * scale, spec) + unit:>{width}}"

def ratio(a, b):
    return a / b if a is not None and b else None

print()
print(f"{'impl':<14} {'batch':>5} {'prec':>5} {'ms/step':>9} {'tokens/s':>9} {'TFLOP/s':>8} "
      f"{'MFU':>6} {'peak mem':>10} {'tok/s:compile':>13} {'mem:compile':>11}")
errors = []
for b in dict.fromkeys(r["batch"] for r in rows):
    ctps, cmem = med("torch-compile", b, "tokens_per_s"), med("torch-compile", b, "peak_mem_bytes")
    for impl in ("mpitron", "torch-eager", "torch-compile"):
        err = next((r["error"] for r in rows if r["impl"] == impl and r["batch"] == b
                    and "error" in r), None)
        tps, mem = med(impl, b, "tokens_per_s"), med(impl, b, "peak_mem_bytes")
        if tps is None and err is None:
            continue
        if err:
            errors.append(f"{impl} at batch {b}: {err}")
        print(f"{impl:<14} {b:>5} {mprec if impl == 'mpitron' else tprec:>5} "
              f"{cell(med(impl, b, 'ms_per_step'), 9, '.1f')} {cell(tps, 9, '.0f')} "
              f"{cell(med(impl, b, 'tflops'), 8, '.1f')} "
              f"{cell(med(impl, b, 'mfu'), 6, '.1f', 100, '%')} "
              f"{cell(mem, 10, '.2f', 2**-30, ' GiB')} {cell(ratio(tps, ctps), 13, '.2f')} "
              f"{cell(ratio(mem, cmem), 11, '.2f')}{'  failed' if err else ''}")
print(f"medians over {rounds} rounds of each run's median over {steps} steps (after {warmup} "
      f"warm-up); seq {seq}; ratios to torch-compile at the same batch")
print("TFLOP/s: model FLOPs 6*(params-wpe)*B*T + 6*L*B*T^2*C (matrix products, causal attention "
      "counted half) per second")
print(f"MFU against {float(peak):g} TFLOP/s for every row: {peak_from}")
print("peak mem: torch.cuda.max_memory_allocated; mpitron: its allocator's peak "
      "(trace/peak_mem_bytes)")
for e in errors:
    print(e)
EOF
echo "raw results: $results"
