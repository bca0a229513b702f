#!/usr/bin/env bash
# The jobs/ batch scripts on a real (single-node) Slurm cluster: every Bridges-2 profile and the
# generic one train, on CPU ranks, and leave a trace, a checkpoint and the run record (revision,
# job id, exact command, a copy of the script and of the body it sources). GPU-shared runs unchanged on fake v100-32 GPUs
# (one rank per GPU, 5 cores each) with DEVICE=cpu; the others get a CPU override (--gpus=0, fewer
# tasks). TP=2 and PP=2 (with SCHEDULE) reach mpitron and train. A layout mpitron does not support
# (PP=5 for gpt-tiny's 4 blocks) is refused by mpitron, not by the script; a rank/GPU mismatch by
# the script, and so is a job on GPUs whose mpitron cannot use them (no CUDA in the build, or no
# driver: it would train on the cores while charged for the GPUs), a job with fewer ranks than it
# asked for per node, a DP x TP x PP that is not the job's ranks, and data missing on the node.
# Without DATA a job passes no --data: mpitron trains on what the preset reads. With a CUDA build (faked: its `devices` lists a GPU and NCCL, its
# `train` records its arguments) a GPU job picks --device cuda and --comm nccl by itself, and
# --comm mpi where ZeRO 2 needs it.
# Arguments: mpitron binary, checkout, work folder.
set -euo pipefail
# shellcheck source=tests/slurm/cluster.sh
source "$(dirname "$0")/cluster.sh"
slurm_test_setup "$@"
cluster_start

steps=20
export STEPS=$steps BATCH_SIZE=8 SEQ_LEN=32 CKPT_EVERY=10 EVAL_EVERY=0 LOG_EVERY=5 THREADS=1
head=$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)

# submit NAME SCRIPT [sbatch options...]: submits with RUN=$WORK/NAME; prints the job id.
submit() {
  local name=$1 script=$2
  shift 2
  mkdir -p "$WORK/$name"
  RUN=$WORK/$name sbatch --parsable -o "$WORK/$name/slurm-%j.out" "$@" "$REPO/jobs/$script"
}

# GPU-shared unchanged where the cluster has its fake GPUs; else with the CPU override.
gpu_args=()
gpus=4
if [[ $CLUSTER_GPUS == 0 ]]; then gpu_args=(--gpus=0) gpus=0; fi
declare -A id
id[gpu-shared]=$(DEVICE=cpu submit gpu-shared bridges2-gpu-shared.sbatch "${gpu_args[@]}")
id[gpu]=$(submit gpu bridges2-gpu.sbatch --gpus=0 --ntasks-per-node=2)
id[rm]=$(submit rm bridges2-rm.sbatch --ntasks-per-node=2 --cpus-per-task=1)
id[generic]=$(ZERO=1 submit generic generic.sbatch --ntasks=2)
id[tp]=$(TP=2 submit tp generic.sbatch) # the script's own 2 ranks a node
id[pp]=$(PP=2 SCHEDULE=gpipe MICRO_BATCHES=2 submit pp generic.sbatch --ntasks=2)
id[refused-pp]=$(PP=5 submit refused-pp generic.sbatch --ntasks-per-node=5)
# Fewer ranks than asked for per node (the script's --ntasks=4 caps --ntasks-per-node=8), and a
# DP x TP x PP that is not the job's ranks: refused by the script before anything runs.
id[refused-capped]=$(submit refused-capped bridges2-rm-shared.sbatch --ntasks-per-node=8 --cpus-per-task=1)
id[refused-dp]=$(DP=4 submit refused-dp generic.sbatch)
fake_cuda=$WORK/fake-cuda-mpitron
cat >"$fake_cuda" <<'EOF'
#!/bin/sh
case $1 in
  devices) printf 'cuda:0 Tesla V100-SXM2-32GB (sm_70), 31.7 GiB\nnccl: 2.18.3\ncpu: gemm via openblas\n' ;;
  train)
    out=. prev=
    for a in "$@"; do
      if [ "$prev" = --out ]; then out=$a; fi
      prev=$a
    done
    echo "$*" >"$out/train-args.${OMPI_COMM_WORLD_RANK:-0}"
    ;;
esac
EOF
chmod +x "$fake_cuda"
# DATA unset: no --data, the job trains on what the preset reads (an MLP's images here); DATA, or
# the preset's [data] path, missing on the node: refused before any rank starts.
id[preset-data]=$(unset DATA; MPITRON=$fake_cuda CONFIG=configs/mlp-fmnist.toml submit preset-data generic.sbatch)
awk '/^\[data\]/ {skip = 1; next} /^\[/ {skip = 0} !skip' "$REPO/configs/gpt-tiny.toml" >"$WORK/no-data.toml"
printf '[data]\npath = "%s"\n' "$WORK/no-such-corpus.txt" >>"$WORK/no-data.toml"
id[refused-preset-data]=$(unset DATA; CONFIG=$WORK/no-data.toml submit refused-preset-data generic.sbatch)
id[refused-data]=$(DATA=$WORK/no-such-corpus.txt submit refused-data generic.sbatch)
if [[ $CLUSTER_GPUS != 0 ]]; then
  id[refused-gpus]=$(submit refused-gpus bridges2-gpu-shared.sbatch --ntasks-per-node=2)
  two_gpus=(--gpus=v100-32:2 --ntasks-per-node=2)
  id[refused-cpu-build]=$(submit refused-cpu-build bridges2-gpu-shared.sbatch "${two_gpus[@]}")
  id[cuda-auto]=$(MPITRON=$fake_cuda PRECISION=fp16 submit cuda-auto bridges2-gpu-shared.sbatch "${two_gpus[@]}")
  id[cuda-zero2]=$(MPITRON=$fake_cuda ZERO=2 submit cuda-zero2 bridges2-gpu.sbatch "${two_gpus[@]}")
fi
# RM-shared through the Makefile, as a user would.
mkdir -p "$WORK/rm-shared"
make -s -C "$REPO" -f Makefile.slurm submit PARTITION=RM-shared RANKS=2 CPUS=1 TIME=10 \
  RUN="$WORK/rm-shared" CONFIG=configs/gpt-tiny.toml STEPS=$steps >"$WORK/make-submit.log" 2>&1 ||
  fail "make -f Makefile.slurm submit failed: $(cat "$WORK/make-submit.log")"
id[rm-shared]=$(sed -n 's/^Submitted batch job \([0-9]*\).*/\1/p' "$WORK/make-submit.log")
[[ -n ${id[rm-shared]} ]] || fail "no job id from make submit: $(cat "$WORK/make-submit.log")"
status=$(make -s -C "$REPO" -f Makefile.slurm status 2>&1)
echo "$status"
for k in "${!id[@]}"; do
  grep -Eq "^ *${id[$k]} " <<<"$status" || fail "make -f Makefile.slurm status does not show job ${id[$k]}"
done
log "submitted: $(for k in "${!id[@]}"; do printf '%s=%s ' "$k" "${id[$k]}"; done)"

# expect NAME STATE: the job ended in STATE.
expect() {
  local state
  state=$(wait_job "${id[$1]}" 240)
  log "$1 (job ${id[$1]}): $state, exit $(job_field "${id[$1]}" ExitCode)"
  if [[ $state != "$2" ]]; then
    cat "$WORK/$1"/slurm-*.out >&2 || true
    fail "$1: job ended $state, expected $2"
  fi
}

# trained NAME SCRIPT RANKS LAUNCHER: a successful run and its record.
trained() {
  local name=$1 script=$2 ranks=$3 launcher=$4 run=$WORK/$1
  expect "$name" COMPLETED
  check_trace "$run" $steps
  [[ $(trace_attr "$run/trace.h5" layout.world) == "$ranks" ]] || fail "$name: world is not $ranks"
  [[ $(trace_attr "$run/trace.h5" layout.dp) == "$ranks" ]] || fail "$name: dp is not $ranks"
  local rec=$run/jobs.log
  [[ -f $rec ]] || fail "$name: no jobs.log"
  grep -qx "job_id=${id[$name]}" "$rec" || fail "$name: job id not recorded: $(cat "$rec")"
  grep -qx "git_rev=$head" "$rec" || fail "$name: git revision $head not recorded: $(cat "$rec")"
  grep -q "^command=.*$launcher.* $MPITRON train .*--out $run --resume auto --dp $ranks " "$rec" ||
    fail "$name: command not recorded as expected ($launcher, --dp $ranks): $(cat "$rec")"
  grep -qx "exit=0 (.*)" "$rec" || fail "$name: exit status not recorded"
  cmp -s "$run/$script" "$REPO/jobs/$script" || fail "$name: $run/$script is not a copy of jobs/$script"
  cmp -s "$run/train_body.sh" "$REPO/jobs/train_body.sh" ||
    fail "$name: $run/train_body.sh is not a copy of jobs/train_body.sh, the body that ran"
  grep -qx "body_sha256=$(sha256sum "$REPO/jobs/train_body.sh" | cut -d' ' -f1)" "$rec" ||
    fail "$name: the body's SHA-256 is not recorded: $(cat "$rec")"
  log "$name: $ranks ranks via $launcher, trace and record ok"
}

trained gpu-shared bridges2-gpu-shared.sbatch 4 mpirun
grep -q "gpus_per_node=$gpus cpus_per_task=5 threads=1 device=cpu comm=mpi " "$WORK/gpu-shared/jobs.log" ||
  fail "gpu-shared: not $gpus GPUs, 5 cores a rank, DEVICE=cpu: $(cat "$WORK/gpu-shared/jobs.log")"
grep -q -- "--device cpu --comm mpi" "$WORK/gpu-shared/jobs.log" || fail "gpu-shared: --device cpu not passed on"
trained gpu bridges2-gpu.sbatch 2 mpirun
trained rm bridges2-rm.sbatch 2 mpirun
trained rm-shared bridges2-rm-shared.sbatch 2 mpirun
trained generic generic.sbatch 2 "srun --mpi=pmix"
[[ $(trace_attr "$WORK/generic/trace.h5" layout.zero) == 1 ]] || fail "generic: ZERO=1 did not arrive"

# TP=2 on 2 tasks: the script infers dp 1 and mpitron trains tensor-parallel.
expect tp COMPLETED
check_trace "$WORK/tp" $steps
[[ $(trace_attr "$WORK/tp/trace.h5" layout.tp) == 2 && $(trace_attr "$WORK/tp/trace.h5" layout.dp) == 1 ]] ||
  fail "tp: TP=2 did not arrive as dp 1 x tp 2"
# PP=2 on 2 tasks: dp 1 x pp 2, with the schedule and micro-batches passed on.
expect pp COMPLETED
check_trace "$WORK/pp" $steps
[[ $(trace_attr "$WORK/pp/trace.h5" layout.pp) == 2 && $(trace_attr "$WORK/pp/trace.h5" layout.dp) == 1 ]] ||
  fail "pp: PP=2 did not arrive as dp 1 x pp 2"
[[ $(trace_attr "$WORK/pp/trace.h5" layout.schedule) == gpipe ]] || fail "pp: SCHEDULE=gpipe did not arrive"
[[ $(trace_attr "$WORK/pp/trace.h5" train.micro_batches) == 2 ]] || fail "pp: MICRO_BATCHES=2 did not arrive"
# PP=5 on 5 tasks: gpt-tiny has 4 blocks, so mpitron refuses it with its message, before training.
expect refused-pp FAILED
grep -q "error: .*more stages than blocks" "$WORK"/refused-pp/slurm-*.out ||
  fail "PP=5 was not refused by mpitron: $(cat "$WORK"/refused-pp/slurm-*.out)"
grep -q -- "--dp 1 --tp 1 --pp 5 " "$WORK/refused-pp/jobs.log" || fail "PP=5 was not passed to mpitron as dp 1 x pp 5"
[[ ! -e $WORK/refused-pp/trace.h5 ]] || fail "the refused PP=5 job trained"
expect refused-capped FAILED
grep -q "error: this job has 4 task(s) on 1 node(s), but asks for 8 per node (8 in all)" \
  "$WORK"/refused-capped/slurm-*.out || fail "4 of 8 ranks a node were not refused: $(cat "$WORK"/refused-capped/slurm-*.out)"
expect refused-dp FAILED
grep -q "error: DP x TP x PP = 4 x 1 x 1 = 4 ranks, but the job has 2" "$WORK"/refused-dp/slurm-*.out ||
  fail "DP=4 on 2 ranks was not refused: $(cat "$WORK"/refused-dp/slurm-*.out)"
a=$(expect preset-data COMPLETED && cat "$WORK/preset-data/train-args.0")
grep -q "^train --config configs/mlp-fmnist.toml --out $WORK/preset-data " <<<"$a" ||
  fail "DATA unset: not the preset's data (no --data): $a"
expect refused-preset-data FAILED
grep -q "error: $WORK/no-data.toml reads $WORK/no-such-corpus.txt, which does not exist on " \
  "$WORK"/refused-preset-data/slurm-*.out ||
  fail "a preset's missing data was not refused: $(cat "$WORK"/refused-preset-data/slurm-*.out)"
expect refused-data FAILED
grep -q "error: DATA=$WORK/no-such-corpus.txt does not exist on " "$WORK"/refused-data/slurm-*.out ||
  fail "a missing DATA was not refused: $(cat "$WORK"/refused-data/slurm-*.out)"
for name in refused-capped refused-dp refused-preset-data refused-data; do
  [[ ! -e $WORK/$name/jobs.log && ! -e $WORK/$name/trace.h5 ]] || fail "$name: the refused job started"
done
if [[ $CLUSTER_GPUS != 0 ]]; then
  expect refused-gpus FAILED
  grep -q "error: one rank per GPU" "$WORK"/refused-gpus/slurm-*.out ||
    fail "2 ranks on 4 GPUs were not refused: $(cat "$WORK"/refused-gpus/slurm-*.out)"
  [[ ! -e $WORK/refused-gpus/trace.h5 ]] || fail "the refused job trained"
  expect refused-cpu-build FAILED
  # This build cannot use the fake GPUs: built without CUDA, or with CUDA but no driver or device.
  grep -q "error: this job holds 2 GPU(s) per node, but .*mpitron cannot use them (" \
    "$WORK"/refused-cpu-build/slurm-*.out ||
    fail "a GPU job whose build cannot use GPUs was not refused: $(cat "$WORK"/refused-cpu-build/slurm-*.out)"
  [[ ! -e $WORK/refused-cpu-build/trace.h5 ]] || fail "the GPU job whose build cannot use GPUs trained"
  # args NAME: what the fake CUDA build's rank 0 was asked to train.
  args() {
    expect "$1" COMPLETED
    [[ -f $WORK/$1/train-args.0 && -f $WORK/$1/train-args.1 ]] || fail "$1: the fake build did not train on 2 ranks"
    cat "$WORK/$1/train-args.0"
  }
  a=$(args cuda-auto)
  grep -q -- "--device cuda --comm nccl --precision fp16" <<<"$a" || fail "cuda-auto: not on the GPUs with NCCL in fp16: $a"
  a=$(args cuda-zero2)
  grep -q -- "--zero 2 .*--device cuda --comm mpi" <<<"$a" || fail "cuda-zero2: ZeRO 2 did not take --comm mpi: $a"
  log "GPU jobs: a build that cannot use them refused; a CUDA build on the GPUs, NCCL where it may"
fi
log "batch jobs ok"
