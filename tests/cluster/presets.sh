#!/usr/bin/env bash
# Every family's preset through a job script on the virtual cluster, shortened, with no DATA: the
# job finds what the preset reads (its [data] path, else the family's default) on the nodes. One
# generic.sbatch job per preset on 2 nodes (dp 2, a rank a node), 2 steps at a small batch; each
# must finish, trace both steps, and have trained on the data `mpitron data-path` names. Presets
# whose data this machine cannot prepare (translation: Debian's diatheke) are skipped by name.
# Arguments: mpitron binary, checkout, work folder, virtual cluster folder.
set -euo pipefail
# shellcheck source=tests/slurm/cluster.sh
source "$(dirname "$0")/../slurm/cluster.sh"
# shellcheck source=tests/cluster/common.sh
source "$(dirname "$0")/common.sh"
cluster_test_setup "$@"

# preset, then its shortened settings (sequence families keep a short sequence).
presets=(
  "gpt-tiny BATCH_SIZE=8 SEQ_LEN=32"
  "bert-mlm BATCH_SIZE=8 SEQ_LEN=32"
  "bert-testament BATCH_SIZE=8 SEQ_LEN=32"
  "mlp-fmnist BATCH_SIZE=16"
  "alexnet-fmnist BATCH_SIZE=16"
  "resnet-fmnist BATCH_SIZE=16"
  "qa-pretrain BATCH_SIZE=8 SEQ_LEN=64"
  "mt-es-en BATCH_SIZE=8 SEQ_LEN=64 EXTRA_ARGS=--set=train.bleu_every=0"
)
ran=0
for entry in "${presets[@]}"; do
  read -r name settings <<<"$entry"
  config=configs/$name.toml
  data=$(cd "$REPO" && "$MPITRON" data-path --config "$config")
  if ! (cd "$REPO" && io/prepare_data.sh "$config" >"$WORK/prepare-$name.log" 2>&1); then
    log "SKIP $name: its data $data cannot be prepared here: $(tail -n 1 "$WORK/prepare-$name.log")"
    continue
  fi
  wait_idle 60
  t=$(date +%s.%N)
  (
    unset DATA
    # shellcheck disable=SC2086,SC2163  # the settings are NAME=value words
    export $settings CONFIG="$config" STEPS=2 EVAL_EVERY=0 LOG_EVERY=1 DP=2 MPITRON_ROOT="$REPO"
    run_job "$name" 150 generic.sbatch -N 2 --ntasks-per-node=1
  ) || fail "$name: the job did not complete"
  run=$WORK/$name
  check_trace "$run" 2
  grep -q -- "--data" "$run/jobs.log" && fail "$name: the job passed --data without DATA: $(grep -- --data "$run/jobs.log")"
  grep -q "$(basename "$data")" "$run"/slurm-*.out ||
    fail "$name: the log does not name its data $data: $(grep -m 2 'data' "$run"/slurm-*.out)"
  log "$name: 2 steps at dp 2 on 2 nodes from $data in $(elapsed "$t") s"
  ran=$((ran + 1))
done
[[ $ran -ge 6 ]] || fail "only $ran presets ran"
log "presets under sbatch ok ($ran of ${#presets[@]})"
