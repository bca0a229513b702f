#!/usr/bin/env bash
# jobs/validate.sbatch on a real (single-node) Slurm cluster, unchanged (RM-shared, 4 tasks): it
# runs CTest's equivalence tests of this build inside the allocation (here two of them, to stay
# quick: the baseline fixture and dp2 with allreduce) and leaves summary.txt, ctest.log and the
# PNG of the compared loss curves in the run folder. A selection that matches no test fails, and so
# does the gpu label where the build sees no GPU.
# Arguments: mpitron binary, checkout, work folder, build folder.
set -euo pipefail
# shellcheck source=tests/slurm/cluster.sh
source "$(dirname "$0")/cluster.sh"
build=$(realpath "$4")
slurm_test_setup "$1" "$2" "$3"
[[ -f $build/CTestTestfile.cmake ]] || fail "$build has no CTestTestfile.cmake"
cluster_start

export BUILD=$build PYTHON
run=$WORK/validate
mkdir -p "$run" "$WORK/none"
id=$(RUN=$run CTEST_ARGS="-R ^equivalence_dp2_allreduce\$" sbatch --parsable \
  -o "$run/slurm-%j.out" "$REPO/jobs/validate.sbatch")
none_id=$(RUN=$WORK/none CTEST_ARGS="-R ^no_such_test\$" sbatch --parsable \
  -o "$WORK/none/slurm-%j.out" "$REPO/jobs/validate.sbatch")
# The gpu label where the build sees no GPU: its tests could only skip, so the job fails, saying so.
mkdir -p "$WORK/gpu"
gpu_id=$(RUN=$WORK/gpu LABEL=gpu sbatch --parsable -o "$WORK/gpu/slurm-%j.out" "$REPO/jobs/validate.sbatch")

state=$(wait_job "$id" 240)
log "validation job $id: $state"
[[ $state == COMPLETED ]] || { cat "$run"/slurm-*.out >&2; fail "the validation job ended $state"; }
cat "$run/summary.txt"
grep -qx "verdict: PASSED" "$run/summary.txt" || fail "summary.txt has no PASSED verdict"
grep -q "^100% tests passed, 0 tests failed out of 2" "$run/summary.txt" ||
  fail "summary.txt does not report the 2 tests (baseline + dp2)"
grep -q "equivalence_baseline .*Passed" "$run/ctest.log" || fail "the baseline did not run"
grep -q "equivalence_dp2_allreduce .*Passed" "$run/ctest.log" || fail "dp2 did not run"
grep -Eq "^  equivalence_dp2_allreduce +[0-9.e+-]+ \(20\)" "$run/summary.txt" ||
  fail "summary.txt has no loss difference for dp2"
grep -q "^plot: equivalence.png (2 traces)" "$run/summary.txt" || fail "no plot in summary.txt"
[[ $(head -c 8 "$run/equivalence.png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] ||
  fail "equivalence.png is not a PNG"
[[ -f $run/validate.sbatch && -f $run/jobs.log && -f $run/ctest/Testing/Temporary/LastTest.log ]] ||
  fail "the run record is incomplete: $(ls "$run")"

state=$(wait_job "$none_id" 60)
[[ $state == FAILED ]] || fail "a validation that ran no test ended $state"
grep -q "verdict: FAILED" "$WORK/none/summary.txt" || fail "no FAILED verdict when no test ran"
state=$(wait_job "$gpu_id" 60)
[[ $state == FAILED ]] || fail "a gpu validation without a usable GPU ended $state"
grep -q "error: LABEL=gpu, but .*mpitron sees no GPU here" "$WORK"/gpu/slurm-*.out ||
  fail "no clear message for LABEL=gpu without a GPU: $(cat "$WORK"/gpu/slurm-*.out)"
log "validation job ok"
