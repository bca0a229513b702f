#!/usr/bin/env bash
# The network, measured and modelled: on a virtual 3-node cluster (tests/cluster/vcluster.sh) whose
# inter-node links tc shapes to fixed rates, bench/pingpong.c times point-to-point messages within
# a node (shared memory) and across nodes (TCP) at the sizes mpitron sends (gpt-tiny's pipeline and
# TP messages up to its 3.4 MB gradients), bench/network_model.py fits time = alpha + bytes * beta
# per link class and writes OUT/network_<rate>.toml for `mpitron plan --network`. Then gpt-tiny
# trains a few steps in each layout on 1-3 nodes (one thread a rank) at the first rate, and a table
# sets the median step against the step `mpitron plan --nodes` predicts from a one-rank run's trace.
# Every virtual node shares this machine's cores: the plan is told each node's share
# (--cores-per-node = cores / nodes), and mpirun binds nothing (--bind-to none: each node's mpirun
# would pin its first rank to core 0, every node's on the same core). Last, the scaling plot for
# Bridges-2 (network_model.py).
# Needs root, no other virtual cluster or Slurm test running, mpicc and tc. Usage:
#   bench/network_model.sh [-r "1gbit 5gbit"] [-s steps] [-b batch] [-t seq_len] [-n reps]
#                          [-B build_dir] [-o out_dir]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
rates="1gbit 5gbit" steps=8 batch=16 seq=64 reps=15
build=$repo/build out=$repo/bench/results
while getopts "r:s:b:t:n:B:o:h" opt; do
  case $opt in
    r) rates=$OPTARG ;;
    s) steps=$OPTARG ;;
    b) batch=$OPTARG ;;
    t) seq=$OPTARG ;;
    n) reps=$OPTARG ;;
    B) build=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,13p' "$0"; exit 2 ;;
  esac
done
bin=$build/mpitron
vc=$repo/tests/cluster/vcluster.sh
python=$("$repo/tests/find_python.sh" h5py numpy matplotlib)
[[ -x $bin ]] || { echo "error: $bin is missing: cmake --build $build --target mpitron" >&2; exit 1; }
command -v mpicc >/dev/null || { echo "error: mpicc is missing (Open MPI's development package)" >&2; exit 1; }
command -v tc >/dev/null || { echo "error: tc is missing (iproute2)" >&2; exit 1; }
if pgrep -x slurmctld >/dev/null; then
  echo "error: a Slurm controller is running (a slurm or cluster test?): measure when it is done" >&2
  exit 1
fi
data=$repo/data/kjv.txt
[[ -f $data ]] || "$repo/io/get_bible.sh" "$data"
mkdir -p "$out"
out=$(realpath "$out")

work=$(mktemp -d)
vdir=$work/vc
export VCLUSTER_ID=${VCLUSTER_ID:-42}
cleanup() {
  local rc=$?
  if [[ -e $vdir/nodes ]]; then "$vc" down "$vdir" || rc=1; fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
"$vc" up 3 "$vdir"
eval "$("$vc" env "$vdir")"
export TMPDIR=$vdir/tmp/clients
mkdir -p "$TMPDIR"
mpicc -O2 -o "$work/pingpong" "$here/pingpong.c"

# shape RATE: every node's link to the bridge at RATE both ways (tc's token bucket; no netem here).
shape() {
  local n
  for n in 1 2 3; do
    tc qdisc replace dev "mpvc${VCLUSTER_ID}n$n" root tbf rate "$1" burst 256kb latency 100ms
    "$vc" exec "$vdir" "node$n" tc qdisc replace dev eth0 root tbf rate "$1" burst 256kb latency 100ms
  done
}

# 1 kB to 4 MB: latency-bound to bandwidth-bound, through gpt-tiny's messages.
sizes=(1024 4096 16384 65536 262144 1048576 2097152 4194304)
date=$(date +%Y-%m-%d)
echo "== point to point within a node (shared memory)"
timeout 300 salloc -N 1 -n 2 mpirun --bind-to none "$work/pingpong" "$reps" "${sizes[@]}" >"$work/intra.txt"
cat "$work/intra.txt"
for rate in $rates; do
  shape "$rate"
  echo "== point to point across nodes (TCP, links shaped to $rate)"
  timeout 300 salloc -N 2 --ntasks-per-node=1 mpirun --bind-to none "$work/pingpong" "$reps" "${sizes[@]}" >"$work/inter_$rate.txt"
  cat "$work/inter_$rate.txt"
  "$python" "$here/network_model.py" fit --intra "$work/intra.txt" --inter "$work/inter_$rate.txt" \
    --note "measured on the virtual cluster (tests/cluster/vcluster.sh, one machine of $(getconf _NPROCESSORS_ONLN) cores), inter-node links shaped to $rate by tc tbf, $date" \
    -o "$out/network_$rate.toml"
done

rate=${rates%% *}
shape "$rate"
net=$out/network_$rate.toml
cores=$(getconf _NPROCESSORS_ONLN)  # nproc would count OMP_NUM_THREADS
common=(--config "$repo/configs/gpt-tiny.toml" --batch-size "$batch" --seq-len "$seq")
train=("${common[@]}" --steps "$steps" --eval-every 0 --log-every 100 --data "$data")
echo "== one rank (the compute)"
timeout 600 salloc -N 1 -n 1 mpirun --bind-to none "$bin" train "${train[@]}" --out "$work/runs/one" >"$work/one.log" 2>&1 ||
  { tail -20 "$work/one.log" >&2; exit 1; }
# The step, and its gradient reduction alone (tied embedding and DP; the slowest rank's, from the
# trace).
printf '%-22s %6s %10s %10s %7s %10s %10s\n' layout nodes predicted measured ratio "sync pred" "sync meas"
# name nodes ranks_per_node flags...
# --dp-reduce ring: mpitron's own ring, the algorithm the model assumes; without it Open MPI's
# MPI_Allreduce picks its own (at 3 ranks not a ring).
layouts=(
  "dp2:1:2:--dp 2"
  "dp2:2:1:--dp 2"
  "dp2xtp2:2:2:--dp 2 --tp 2"
  "dp2xtp2_ring:2:2:--dp 2 --tp 2 --dp-reduce ring"
  "dp3:3:1:--dp 3"
  "dp3_ring:3:1:--dp 3 --dp-reduce ring"
  "dp2xpp2:2:2:--dp 2 --pp 2 --micro-batches 2"
)
for l in "${layouts[@]}"; do
  IFS=: read -r name nodes per flags <<<"$l"
  read -r -a f <<<"$flags"
  b=$batch
  [[ $name == dp3* ]] && b=$((batch * 3 / 4))  # rows divide evenly over 3
  run=$work/runs/${name}_$nodes
  timeout 600 salloc -N "$nodes" --ntasks-per-node="$per" mpirun --bind-to none "$bin" train "${train[@]}" \
    --batch-size "$b" "${f[@]}" --out "$run" >"$run.log" 2>&1 || { tail -20 "$run.log" >&2; exit 1; }
  measured=$("$python" "$here/network_model.py" median "$run/trace.h5")
  # The one-rank run's batch was $batch: its compute scales to this batch.
  one=$("$python" "$here/network_model.py" median "$work/runs/one/trace.h5")
  step_one=$(awk -v s="$one" -v a="$b" -v c="$batch" 'BEGIN { printf "%.6f", s * a / c }')
  "$bin" plan "${common[@]}" --batch-size "$b" "${f[@]}" --nodes "$nodes" --ranks-per-node "$per" \
    --network "$net" --compute-step-s "$step_one" \
    --cores-per-node "$(awk -v c="$cores" -v n="$nodes" 'BEGIN { printf "%.4g", c / n }')" >"$run.plan"
  predicted=$(sed -n 's/^total step  *\([0-9.]*\) s.*/\1/p' "$run.plan")
  # The trace's gradient reduction holds the tied embedding's all-reduce, then the DP one.
  dp_pred=$(sed -n -E 's/^(DP gradient all-reduce|tied embedding) +([0-9.]+) s.*/\2/p' "$run.plan" |
    awk '{ t += $1 } END { printf "%.6f", t }')
  dp_meas=$("$python" "$here/network_model.py" sync "$run/trace.h5")
  printf '%-22s %6s %10.4f %10.4f %7.2f %10.4f %10.4f\n' "$name (${per}/node)" "$nodes" \
    "$predicted" "$measured" "$(awk -v p="$predicted" -v m="$measured" 'BEGIN { print p / m }')" \
    "$dp_pred" "$dp_meas"
done
echo "(one rank, batch $batch: median step $("$python" "$here/network_model.py" median "$work/runs/one/trace.h5") s; links at $rate; $cores cores shared by all nodes; load average now $(cut -d' ' -f1-3 /proc/loadavg))"

echo "== scaling prediction for Bridges-2"
"$python" "$here/network_model.py" scaling --mpitron "$bin" --repo "$repo" -o "$out/network_scaling.png"
