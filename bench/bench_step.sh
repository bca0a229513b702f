#!/usr/bin/env bash
# Step time of mpitron against the PyTorch reference (validate/gpt_torch.py) on the same configs,
# run alternately (the order flips every round) so that machine noise hits both alike; prints the
# median over rounds of each run's median ms/step, tokens/s, GFLOP/s and the ratio mpitron/torch.
#   (a) configs/gpt2-124m.toml at batch 4, seq 64    (b) small: 4 layers, width 256, 4 heads,
#   byte vocab, batch 8, seq 128.
# Both use OpenBLAS, openmp flavour (selected with update-alternatives when run as root), with
# the same kernel set and torch without allocator churn (bench/same_footing.sh),
# OMP_PROC_BIND=true OMP_PLACES=cores.
# With -p OTHER_BUILD, that build's bench_step runs in the same rounds as "previous" (a commit
# before a change, measured side by side with it) and the table adds its ms/step and ratio.
# Each round also measures the cores' fp32 peak (bench/peak_flops, FMA chains in registers): the
# table gives each side's share of it and the step time the model FLOPs alone would take at it.
# Usage: bench/bench_step.sh [-r rounds] [-t threads] [-b build_dir] [-p other_build] [-o out_dir]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
rounds=3 threads=2 build="$repo/build" out="" previous=""
while getopts "r:t:b:p:o:h" opt; do
  case $opt in
    r) rounds=$OPTARG ;;
    t) threads=$OPTARG ;;
    b) build=$OPTARG ;;
    p) previous=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,13p' "$0"; exit 2 ;;
  esac
done
python=${PYTHON:-$("$repo/tests/find_python.sh" torch h5py || echo python3)}
bench="$build/bench/bench_step"
for b in "$bench" "$build/bench/peak_flops" ${previous:+"$previous/bench/bench_step"}; do
  if [[ ! -x $b ]]; then
    echo "error: $b is missing: cmake --build $(dirname "$(dirname "$b")") --target $(basename "$b")" >&2
    exit 1
  fi
done
if ! $python -c "import torch" 2>/dev/null; then
  echo "error: $python cannot import torch (apt-get install python3-torch)" >&2
  exit 1
fi
out=${out:-$(mktemp -d /tmp/bench_step.XXXXXX)}
mkdir -p "$out"
results="$out/results.jsonl"
: >"$results"

# Debian's torch calls whatever libblas.so.3 the alternatives system selects; mpitron links
# libopenblas.so.0. The openmp flavour lets both share libgomp's threads (the pthread flavour
# oversubscribes the cores when called inside OpenMP regions).
arch=x86_64-linux-gnu
flavour=/usr/lib/$arch/openblas-openmp
declare -A want=(
  [libblas.so.3-$arch]=$flavour/libblas.so.3
  [liblapack.so.3-$arch]=$flavour/liblapack.so.3
  [libopenblas.so.0-$arch]=$flavour/libopenblas.so.0
)
for name in "${!want[@]}"; do
  target=${want[$name]}
  current=$(update-alternatives --query "$name" 2>/dev/null | sed -n 's/^Value: //p' || true)
  if [[ $current == "$target" ]]; then
    continue
  elif [[ $EUID -eq 0 && -e $target ]]; then
    update-alternatives --set "$name" "$target" >/dev/null
    echo "selected $target for $name (was ${current:-unset})"
  else
    echo "warning: $name is ${current:-unset}, not $target (needs root and libopenblas0-openmp):" \
      "torch's BLAS may differ from mpitron's" >&2
  fi
done

mpitron=$build/mpitron
# shellcheck source=bench/same_footing.sh
source "$here/same_footing.sh"
export OMP_PROC_BIND=true OMP_PLACES=cores OMP_NUM_THREADS=$threads
export OPENBLAS_NUM_THREADS=$threads

cases=(
  "gpt2-124m|--config $repo/configs/gpt2-124m.toml --batch 4 --seq 64 --steps 5 --warmup 2"
  "small|--batch 8 --seq 128 --layers 4 --embd 256 --heads 4 --vocab 256 --steps 10 --warmup 3"
)

run_one() {  # impl, case name, args
  local impl=$1 name=$2 args=$3 line
  if [[ $impl == mpitron ]]; then
    # shellcheck disable=SC2086
    line=$("$bench" $args --threads "$threads" --json | tail -n 1)
  elif [[ $impl == previous ]]; then
    # shellcheck disable=SC2086
    line=$("$previous/bench/bench_step" $args --threads "$threads" --json | tail -n 1 |
      sed 's/"impl": "mpitron"/"impl": "previous"/')
  else
    # shellcheck disable=SC2086
    line=$("${torch_env[@]}" $python "$here/torch_step.py" $args --threads "$threads" | tail -n 1)
  fi
  echo "$line" >>"$results"
  $python -c 'import json, sys; d = json.loads(sys.argv[1])
print(f"  {d['"'impl'"']:<8} {d['"'ms_per_step'"']:>10.1f} ms/step")' "$line"
}

echo "threads $threads, $rounds rounds, OMP_PROC_BIND=$OMP_PROC_BIND OMP_PLACES=$OMP_PLACES," \
  "blas $(readlink -f /usr/lib/$arch/libblas.so.3)"
for c in "${cases[@]}"; do
  name=${c%%|*} args=${c#*|}
  echo "$name: $args"
  for ((r = 1; r <= rounds; r++)); do
    if ((r % 2)); then order=(mpitron torch ${previous:+previous}); else
      order=(${previous:+previous} torch mpitron); fi
    for impl in "${order[@]}"; do run_one "$impl" "$name" "$args"; done
    "$build/bench/peak_flops" --threads "$threads" --repeats 3 --seconds 0.2 --json |
      sed "s/^{/{\"impl\": \"peak\", \"config\": \"$name\", /" >>"$results"
  done
done

$python - "$results" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def med(impl, cfg, key, how=statistics.median):
    v = [r[key] for r in rows if r["impl"] == impl and r["config"] == cfg]
    return how(v) if v else float("nan")
configs = list(dict.fromkeys(r["config"] for r in rows))
print()
print(f"{'config':<10} {'BxT':>7} {'params':>8} {'mpitron ms':>11} {'torch ms':>9} "
      f"{'ratio m/t':>9} {'m tok/s':>8} {'t tok/s':>8} {'m GFLOP/s':>9} {'t GFLOP/s':>9} "
      f"{'allocs/step':>11} {'best m/t':>8}")
for c in configs:
    r0 = next(r for r in rows if r["config"] == c)
    m, t = med("mpitron", c, "ms_per_step"), med("torch", c, "ms_per_step")
    print(f"{c:<10} {r0['batch']:>3}x{r0['seq']:<3} {r0['params'] / 1e6:>7.1f}M {m:>11.1f} "
          f"{t:>9.1f} {m / t:>9.2f} {med('mpitron', c, 'tokens_per_s'):>8.0f} "
          f"{med('torch', c, 'tokens_per_s'):>8.0f} {med('mpitron', c, 'gflops'):>9.1f} "
          f"{med('torch', c, 'gflops'):>9.1f} {med('mpitron', c, 'allocations_per_step'):>11g} "
          f"{med('mpitron', c, 'ms_per_step', min) / med('torch', c, 'ms_per_step', min):>8.2f}")
peaks = [r["peak_gflops"] for r in rows if r["impl"] == "peak"]
if peaks:
    peak = statistics.median(peaks)
    print()
    print(f"fp32 peak of {rows[0]['threads']} threads: {peak:.1f} GFLOP/s (median of "
          f"{len(peaks)} measurements, range {min(peaks):.1f}-{max(peaks):.1f})")
    print(f"{'config':<10} {'m % peak':>8} {'t % peak':>8} {'FLOPs at peak ms':>16} "
          f"{'at peak / torch':>15}")
    for c in configs:
        m, t = med("mpitron", c, "gflops"), med("torch", c, "gflops")
        r0 = next(r for r in rows if r["config"] == c and r["impl"] == "mpitron")
        at_peak = 1e3 * r0["model_gflop_per_step"] / peak
        print(f"{c:<10} {100 * m / peak:>7.1f}% {100 * t / peak:>7.1f}% {at_peak:>16.1f} "
              f"{at_peak / med('torch', c, 'ms_per_step'):>15.2f}")
    print("FLOPs at peak: the model FLOPs of one step at the peak (no memory traffic, no other "
          "work): no step can be faster")
if any(r["impl"] == "previous" for r in rows):
    print()
    print(f"{'config':<10} {'mpitron ms':>11} {'previous ms':>12} {'ratio m/p':>9} {'best m/p':>8}")
    for c in configs:
        m, p = med("mpitron", c, "ms_per_step"), med("previous", c, "ms_per_step")
        best = med("mpitron", c, "ms_per_step", min) / med("previous", c, "ms_per_step", min)
        print(f"{c:<10} {m:>11.1f} {p:>12.1f} {m / p:>9.3f} {best:>8.3f}")
print("medians over rounds of each run's median ms/step; best m/t: ratio of the fastest runs")
print("GFLOP/s from model FLOPs 6*(params-wpe)*B*T + 6*L*B*T^2*C")
EOF
echo "raw results: $results"
