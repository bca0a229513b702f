#!/usr/bin/env bash
# Interactive allocations of two nodes on the virtual cluster (salloc -N 2): `srun --mpi=pmix` of
# mpitron itself, and jobs/interactive.sh run in a one-task step as PSC's `interact` does (on
# partition RM: bridges2-rm.sbatch through mpirun, whose daemons reach the other node with srun
# --overlap), train the same short run; both traces equal the single-process baseline's.
# Arguments: mpitron binary, checkout, work folder, virtual cluster folder, baseline folder.
set -euo pipefail
# shellcheck source=tests/slurm/cluster.sh
source "$(dirname "$0")/../slurm/cluster.sh"
# shellcheck source=tests/cluster/common.sh
source "$(dirname "$0")/common.sh"
cluster_test_setup "$@"
baseline_env

# session NAME SALLOC_OPTIONS -- COMMAND...: COMMAND in an allocation, output in NAME.log.
session() {
  local name=$1 opts=() rc=0 t
  shift
  while [[ $1 != -- ]]; do
    opts+=("$1")
    shift
  done
  shift
  t=$(date +%s.%N)
  RUN=$WORK/$name launch "$WORK/$name.log" timeout -k 10 120 salloc "${opts[@]}" "$@" || rc=$?
  if [[ $rc != 0 ]]; then
    cat "$WORK/$name.log" >&2
    fail "$name: exit $rc"
  fi
  log "$name: $(elapsed "$t") s"
}

read -r -a flags <"$BASELINE_DIR/flags"
session srun-mpitron -N 2 --ntasks-per-node=2 -- \
  srun --mpi=pmix "$MPITRON" train --config "$CONFIG" --data "$DATA" "${flags[@]}" --out "$WORK/srun-mpitron"
grep -q "ranks by host: node[0-9]*: ranks 0-1; node[0-9]*: ranks 2-3" "$WORK/srun-mpitron.log" ||
  fail "srun-mpitron: not 2 ranks on each of 2 nodes: $(grep 'ranks by host' "$WORK/srun-mpitron.log")"
check_trace "$WORK/srun-mpitron" "$STEPS"
same_as_baseline "$WORK/srun-mpitron"

session interactive-rm -p RM -N 2 --ntasks-per-node=2 -- srun -n 1 "$REPO/jobs/interactive.sh" train
run=$WORK/interactive-rm
check_trace "$run" "$STEPS"
grep -q "ranks by host: node[0-9]*: ranks 0-1; node[0-9]*: ranks 2-3" "$WORK/interactive-rm.log" ||
  fail "interactive-rm: not 2 ranks on each of 2 nodes: $(cat "$WORK/interactive-rm.log")"
grep -q "partition=RM .*launcher=mpirun" "$run/jobs.log" || fail "interactive-rm: not RM through mpirun: $(cat "$run/jobs.log")"
[[ -f $run/bridges2-rm.sbatch ]] || fail "interactive-rm: the partition's script did not run"
same_as_baseline "$run"
"$MPITRON" compare "$WORK/srun-mpitron/trace.h5" "$run/trace.h5" --rtol 0 >/dev/null ||
  fail "the two sessions' dp 4 runs differ"
log "interactive sessions on 2 nodes ok"
