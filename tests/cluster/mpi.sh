#!/usr/bin/env bash
# Open MPI across the virtual cluster's nodes, started both ways the job scripts use: direct launch
# `srun --mpi=pmix` (3 nodes, 6 ranks) and `mpirun` inside an allocation (salloc -N 2) and inside a
# batch job (sbatch -N 2). Every rank reports its host: the ranks are on distinct hosts, and their
# all-reduce crosses nodes over TCP on the cluster's bridge. A node has no route out.
# Arguments: mpitron binary, checkout, work folder, virtual cluster folder.
set -euo pipefail
# shellcheck source=tests/slurm/cluster.sh
source "$(dirname "$0")/../slurm/cluster.sh"
# shellcheck source=tests/cluster/common.sh
source "$(dirname "$0")/common.sh"
cluster_test_setup "$@"

command -v mpicc >/dev/null || skip "mpicc is missing (Open MPI's development package)"
mpicc -O1 -o hello "$REPO/tests/cluster/mpi_hello.c" || fail "mpicc cannot build tests/cluster/mpi_hello.c"

# ranks_ok NAME RANKS HOSTS OUTPUT: RANKS ranks answered, all agreeing on the sum, on HOSTS hosts.
ranks_ok() {
  local name=$1 ranks=$2 hosts=$3 out=$4 got sum
  got=$(grep -c "^rank [0-9]* of $ranks on node[0-9]* sum " <<<"$out" || true)
  sum=$((ranks * (ranks + 1) / 2))
  [[ $got == "$ranks" ]] || { echo "$out" >&2; fail "$name: $got of $ranks ranks answered"; }
  [[ $(grep -c " sum $sum$" <<<"$out") == "$ranks" ]] || { echo "$out" >&2; fail "$name: a wrong sum"; }
  local seen
  seen=$(sed -n 's/^rank [0-9]* of [0-9]* on \(node[0-9]*\) .*/\1/p' <<<"$out" | sort -u | tr '\n' ' ')
  [[ $(wc -w <<<"$seen") == "$hosts" ]] || { echo "$out" >&2; fail "$name: ranks on $seen, not on $hosts hosts"; }
  log "$name: $ranks ranks on $seen"
}

t=$(date +%s.%N)
out=$(timeout 60 srun -N 3 -n 6 --mpi=pmix ./hello 2>&1) || { echo "$out" >&2; fail "srun -N 3 -n 6 --mpi=pmix failed"; }
ranks_ok "srun --mpi=pmix" 6 3 "$out"
log "srun -N 3 -n 6 --mpi=pmix: $(elapsed "$t") s"

t=$(date +%s.%N)
out=$(timeout 60 salloc -N 2 --ntasks-per-node=2 mpirun ./hello 2>&1) ||
  { echo "$out" >&2; fail "mpirun in salloc -N 2 failed"; }
ranks_ok "salloc -N 2 + mpirun" 4 2 "$out"
log "salloc -N 2 --ntasks-per-node=2 mpirun: $(elapsed "$t") s"

cat >job.sh <<JOB
#!/bin/bash
mpirun "$WORK/hello"
JOB
t=$(date +%s.%N)
id=$(sbatch --parsable -N 2 --ntasks-per-node=3 -o "$WORK/job.out" job.sh)
state=$(wait_job "$id" 60)
[[ $state == COMPLETED ]] || { cat job.out >&2; fail "sbatch -N 2 with mpirun: job $id ended $state"; }
ranks_ok "sbatch -N 2 + mpirun" 6 2 "$(cat job.out)"
log "sbatch -N 2 --ntasks-per-node=3 mpirun: $(elapsed "$t") s"

# The nodes: each its own hostname, an address on the bridge and no way out of it.
for n in $(sinfo -h -N -o %N | sort -u); do
  [[ $("$VC" exec "$VCLUSTER_DIR" "$n" hostname) == "$n" ]] || fail "$n's hostname is not $n"
  routes=$("$VC" exec "$VCLUSTER_DIR" "$n" ip route)
  grep -q default <<<"$routes" && fail "$n has a route out: $routes"
  [[ $(wc -l <<<"$routes") == 1 ]] || fail "$n has more than its bridge's route: $routes"
done
log "mpi across nodes ok"
