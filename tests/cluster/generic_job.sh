#!/usr/bin/env bash
# jobs/generic.sbatch, unmodified, on two nodes of the virtual cluster: `sbatch -N 2
# --ntasks-per-node=4` trains gpt-tiny at dp 2 x tp 2 x pp 2 (launched with srun --mpi=pmix, its
# tensor- and pipeline-parallel groups spread over both nodes) with the equivalence baseline's
# settings, and its loss trace equals the single-process baseline's at the equivalence matrix's
# tolerance (tests/e2e/layout.sh).
# Arguments: mpitron binary, checkout, work folder, virtual cluster folder, baseline folder.
set -euo pipefail
# shellcheck source=tests/slurm/cluster.sh
source "$(dirname "$0")/../slurm/cluster.sh"
# shellcheck source=tests/cluster/common.sh
source "$(dirname "$0")/common.sh"
cluster_test_setup "$@"
baseline_env
export DP=2 TP=2 PP=2

t=$(date +%s.%N)
# As a user types it: the script asks for ranks per node, which -N 2 --ntasks-per-node=4 makes 8.
run_job generic 150 generic.sbatch -N 2 --ntasks-per-node=4
log "generic.sbatch -N 2 --ntasks-per-node=4: $(elapsed "$t") s from submission to the end"
run=$WORK/generic
check_trace "$run" "$STEPS"
for k in world:8 dp:2 tp:2 pp:2; do
  [[ $(trace_attr "$run/trace.h5" "layout.${k%%:*}") == "${k#*:}" ]] ||
    fail "layout.${k%%:*} is $(trace_attr "$run/trace.h5" "layout.${k%%:*}"), not ${k#*:}"
done
hosts=$(hosts_of "$run")
[[ $hosts == *"node"*": ranks 0-3; node"*": ranks 4-7" ]] || fail "not 4 ranks on each of 2 nodes: $hosts"
grep -q "launcher=srun" "$run/jobs.log" || fail "not launched with srun: $(cat "$run/jobs.log")"
same_as_baseline "$run"
log "generic job: dp2 x tp2 x pp2 on 2 nodes ($hosts) equals the baseline"
