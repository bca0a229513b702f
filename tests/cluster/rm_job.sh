#!/usr/bin/env bash
# jobs/bridges2-rm.sbatch, unmodified, on two nodes of the virtual cluster's partition RM: launched
# with mpirun as on Bridges-2, with a site profile in place of Bridges-2's modules (SITE_ENV: Open
# MPI over the cluster's bridge), 2 ranks a node instead of RM's 8 (the cores here are few), one
# compute thread a rank. Its loss trace equals the single-process baseline's at the equivalence
# matrix's tolerance.
# Arguments: mpitron binary, checkout, work folder, virtual cluster folder, baseline folder.
set -euo pipefail
# shellcheck source=tests/slurm/cluster.sh
source "$(dirname "$0")/../slurm/cluster.sh"
# shellcheck source=tests/cluster/common.sh
source "$(dirname "$0")/common.sh"
cluster_test_setup "$@"
baseline_env

t=$(date +%s.%N)
id=$(submit rm bridges2-rm.sbatch -N 2 --ntasks-per-node=2)
finished rm "$id" 150
log "bridges2-rm.sbatch -N 2 --ntasks-per-node=2: $(elapsed "$t") s from submission to the end"
run=$WORK/rm
check_trace "$run" "$STEPS"
[[ $(trace_attr "$run/trace.h5" layout.world) == 4 && $(trace_attr "$run/trace.h5" layout.dp) == 4 ]] ||
  fail "not dp 4 on 4 ranks"
hosts=$(hosts_of "$run")
[[ $hosts == *"node"*": ranks 0-1; node"*": ranks 2-3" ]] || fail "not 2 ranks on each of 2 nodes: $hosts"
grep -q "partition=RM .*launcher=mpirun" "$run/jobs.log" || fail "not on RM through mpirun: $(cat "$run/jobs.log")"
cmp -s "$run/bridges2-rm.sbatch" "$REPO/jobs/bridges2-rm.sbatch" || fail "the run's copy is not jobs/bridges2-rm.sbatch"
same_as_baseline "$run"
log "RM job: dp4 on 2 nodes through mpirun ($hosts) equals the baseline"
