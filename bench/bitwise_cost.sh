#!/usr/bin/env bash
# What `mpitron train --bitwise` costs on the whole training step, on the CPU: per case, the step
# time of (a) a build of the commit before --bitwise (-p), (b) this build without --bitwise and
# (c) this build with --bitwise, run alternately (the order flips every round) so that machine
# noise hits all alike. Prints per case the median over rounds of each run's median step time
# (the trace's /trace/step_s, steps 3..: the first 2 warm up) and the ratios bitwise/new and
# new/previous. Cases (threads pinned: OMP_PROC_BIND=true OMP_PLACES=cores; -t threads a rank):
#   gpt2      configs/gpt2-124m.toml at batch 4 x seq 64 on data/kjv.txt (bytes), dropout as the
#             preset (0); --bitwise: gcd(4, 24) = 4 reduction shards of one row, 4 TP shards
#   alexnet   configs/alexnet-fmnist.toml at its batch (64: 8 shards of 8), dropout as the preset
#   resnet    configs/resnet-fmnist.toml at its batch (64: 8 shards of 8)
#             (both CNNs on /usr/share/datasets/fashion-mnist, augmentation off as in
#             bench/family_step.sh: the step includes drawing the batch)
#   gpt2-tp2  gpt2 with --tp 2 on 2 ranks of 1 thread (mpirun --bind-to core), no previous column
# -x adds to gpt2 the runs that say where --bitwise's time goes: the new build with
# --micro-batches 4 (the one-row micro-batches alone) and --bitwise --tp-shards 1 (the shards and
# trees without splitting the GEMMs' K over 4 TP shards).
# The new binary is copied into the work folder first, so that a rebuild does not change it
# mid-run; run folders (GPT-2's end-of-run checkpoint is 1.7 GB) go under /dev/shm when it exists
# and are removed after each run.
# Usage: bench/bitwise_cost.sh [-c "gpt2 alexnet resnet gpt2-tp2"] [-r rounds] [-t threads]
#                              [-s steps] [-b build_dir] [-p previous_build_dir] [-x] [-o out_dir]
#   steps: per run (default 10; the first 2 warm up)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
cases="gpt2 alexnet resnet gpt2-tp2" rounds=3 threads=2 steps=10 build="$repo/build" prev=""
parts=0 out=""
while getopts "c:r:t:s:b:p:xo:h" opt; do
  case $opt in
    c) cases=$OPTARG ;;
    r) rounds=$OPTARG ;;
    t) threads=$OPTARG ;;
    s) steps=$OPTARG ;;
    b) build=$OPTARG ;;
    p) prev=$OPTARG ;;
    x) parts=1 ;;
    o) out=$OPTARG ;;
    *) sed -n '2,25p' "$0"; exit 2 ;;
  esac
done
python=${PYTHON:-$("$repo/tests/find_python.sh" h5py || echo python3)}
[[ -x $build/mpitron ]] || { echo "error: $build/mpitron is missing (make build)" >&2; exit 1; }
[[ -z $prev || -x $prev/mpitron ]] || { echo "error: $prev/mpitron is missing" >&2; exit 1; }
((steps > 2)) || { echo "error: -s takes more than 2 steps (the first 2 warm up)" >&2; exit 2; }
kjv=$repo/data/kjv.txt images=/usr/share/datasets/fashion-mnist
[[ -s $kjv ]] || { echo "error: $kjv is missing (io/get_bible.sh $kjv)" >&2; exit 1; }
[[ -d $images ]] || { echo "error: $images is missing (apt-get install dataset-fashion-mnist)" >&2; exit 1; }
out=${out:-$(mktemp -d /tmp/bitwise_cost.XXXXXX)}
mkdir -p "$out"
runs=$(mktemp -d "$([[ -d /dev/shm && -w /dev/shm ]] && echo /dev/shm || echo "$out")/bitwise_cost.XXXXXX")
trap 'rm -rf "$runs"' EXIT

# The binaries as they are now (a rebuild during the run changes nothing) and their commits.
commit_of() {  # build folder: the commit of its source tree, with the count of changed files
  local src
  src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$1/CMakeCache.txt" 2>/dev/null || true)
  [[ -n $src ]] || { echo "unknown"; return; }
  echo "$(git -C "$src" log --oneline -1 | cut -c1-72)" \
    "($src; $(git -C "$src" status --short --untracked-files=no | wc -l) tracked files changed)"
}
cp "$build/mpitron" "$out/mpitron"
new=$out/mpitron
echo "new:      $new, copied $(date '+%F %T') from $build: $(commit_of "$build")"
if [[ -n $prev ]]; then
  cp "$prev/mpitron" "$out/mpitron.prev"
  echo "previous: $out/mpitron.prev, from $prev: $(commit_of "$prev")"
  prev=$out/mpitron.prev
fi
echo "machine:  $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores;" \
  "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_PROC_BIND=true OMP_PLACES=cores
gpt2="--config $repo/configs/gpt2-124m.toml --data $kjv --batch-size 4 --seq-len 64"
declare -A args=(
  [gpt2]=$gpt2
  [alexnet]="--config $repo/configs/alexnet-fmnist.toml --data $images --set train.augment=0"
  [resnet]="--config $repo/configs/resnet-fmnist.toml --data $images --set train.augment=0"
  [gpt2-tp2]="$gpt2 --tp 2"
)
declare -A ranks=([gpt2]=1 [alexnet]=1 [resnet]=1 [gpt2-tp2]=2)
# A variant's name and the flags it adds; "prev" runs the previous binary.
declare -A flags=([prev]="" [new]="" [bitwise]="--bitwise" [mb4]="--micro-batches 4"
  [bitwise-ts1]="--bitwise --tp-shards 1")

run_one() {  # case variant round: prints "median_step_s micro_batches" of the run
  local c=$1 v=$2 dir=$runs/$1_$2_$3 bin=$new n=${ranks[$1]} t=$threads
  [[ $v == prev ]] && bin=$prev
  ((n > 1)) && t=1
  local cmd=("$bin" train)
  ((n > 1)) && cmd=(mpirun -n "$n" --bind-to core --map-by core "$bin" train)
  # shellcheck disable=SC2086  # the args and flags are words
  OMP_NUM_THREADS=$t "${cmd[@]}" ${args[$c]} ${flags[$v]} --steps "$steps" --eval-every 0 \
    --eval-batches 1 --log-every 0 --threads "$t" --out "$dir" >"$out/$1_$2_$3.log" 2>&1 ||
    { tail -n 5 "$out/$1_$2_$3.log" >&2; exit 1; }
  $python -c "
import sys, h5py, statistics
with h5py.File(sys.argv[1], 'r') as f:
    print(statistics.median(f['trace/step_s'][2:]), f.attrs['train.micro_batches'])" \
    "$dir/trace.h5"
  rm -rf "$dir"
}
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

for c in $cases; do
  [[ -n ${args[$c]:-} ]] || { echo "error: no case $c (gpt2 alexnet resnet gpt2-tp2)" >&2; exit 2; }
  variants=(new bitwise)
  [[ -n $prev && ${ranks[$c]} == 1 ]] && variants=(prev "${variants[@]}")
  ((parts)) && [[ $c == gpt2 ]] && variants+=(mb4 bitwise-ts1)
  for v in "${variants[@]}"; do : >"$out/$c.$v"; done
  for ((r = 0; r < rounds; r++)); do
    order=("${variants[@]}")
    if ((r % 2)); then for ((i = 0; i < ${#variants[@]}; i++)); do
      order[i]=${variants[${#variants[@]} - 1 - i]}; done; fi
    for v in "${order[@]}"; do
      res=$(run_one "$c" "$v" "$r")
      read -r s mb <<<"$res"
      echo "$s" >>"$out/$c.$v"
      [[ $v == bitwise ]] && echo "$mb" >"$out/$c.shards"
      awk -v c="$c" -v r="$r" -v v="$v" -v s="$s" -v mb="$mb" 'BEGIN {
        printf "  %-8s round %d %-11s %9.1f ms/step (%d micro-batches)\n", c, r + 1, v, s * 1e3, mb }'
    done
  done
done

echo
printf '%-8s %5s %7s %7s %11s %10s %10s %11s %8s\n' case ranks threads shards previous_ms new_ms \
  bitwise_ms bitwise/new new/prev
for c in $cases; do
  n=${ranks[$c]} t=$threads
  ((n > 1)) && t=1
  p=0 m=$(median <"$out/$c.new") b=$(median <"$out/$c.bitwise")
  [[ -s $out/$c.prev ]] && p=$(median <"$out/$c.prev")
  awk -v c="$c" -v n="$n" -v t="$t" -v s="$(cat "$out/$c.shards")" -v p="$p" -v m="$m" -v b="$b" '
    function ms(x) { return x > 0 ? sprintf("%.1f", x * 1e3) : "-" }
    BEGIN { printf "%-8s %5d %7d %7d %11s %10s %10s %11.3f %8s\n", c, n, t, s, ms(p), ms(m), ms(b),
      b / m, (p > 0 ? sprintf("%.3f", m / p) : "-") }'
done
if ((parts)) && [[ " $cases " == *" gpt2 "* ]]; then
  echo
  echo "gpt2, where --bitwise's time goes (ms/step, ratio to new):"
  m=$(median <"$out/gpt2.new")
  for v in new mb4 bitwise-ts1 bitwise; do
    awk -v v="$v ${flags[$v]}" -v s="$(median <"$out/gpt2.$v")" -v m="$m" 'BEGIN {
      printf "  %-40s %9.1f %7.3f\n", v, s * 1e3, s / m }'
  done
fi
echo "(medians over $rounds rounds of each run's median step time, steps 3..$steps; shards: the" \
  "--bitwise run's micro-batches a rank; load average after: $(cut -d' ' -f1-3 /proc/loadavg))"
echo "logs and per-round step times: $out"
