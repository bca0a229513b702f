#!/usr/bin/env bash
# Static checks of the Slurm scripts, no cluster needed: shellcheck is clean on jobs/ and
# tests/slurm/; the training scripts share one body; every script refuses to run outside Slurm;
# `make -f Makefile.slurm help` documents every target; the Makefile passes resources and the
# layout through as documented. Argument: the checkout.
set -euo pipefail
REPO=$(realpath "$1")
cd "$REPO"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

if ! command -v shellcheck >/dev/null; then
  echo "SKIP: shellcheck is missing (apt-get install shellcheck, or make deps)" >&2
  exit 77
fi
shopt -s nullglob
files=(jobs/*.sbatch jobs/*.sh jobs/*.env tests/slurm/*.sh tests/cluster/*.sh tests/e2e/*.sh tests/*.sh io/*.sh bench/*.sh)
[[ ${#files[@]} -ge 10 ]] || fail "expected the job scripts and tests, found: ${files[*]}"
shellcheck --external-sources "${files[@]}" || fail "shellcheck found problems (above)"
echo "shellcheck: clean on ${#files[@]} files"

# One body, jobs/train_body.sh: every training script is its #SBATCH header, its site defaults and
# the same few lines that find and source the body (from MPITRON_ROOT or the submit folder).
[[ " ${files[*]} " == *" jobs/train_body.sh "* ]] || fail "jobs/train_body.sh is missing (or not shellchecked)"
[[ $(wc -l <jobs/train_body.sh) -gt 100 ]] || fail "jobs/train_body.sh is not the training body"
training=(jobs/generic.sbatch jobs/bridges2-*.sbatch)
[[ ${#training[@]} == 5 ]] || fail "expected 5 training scripts, found ${training[*]}"
loader() { sed -n '/^# ---- common body/,$p' "$1"; }
# shellcheck disable=SC2016  # the script's text
loader jobs/generic.sbatch | grep -qx 'source "$MPITRON_BODY"' || fail "jobs/generic.sbatch does not source the body"
[[ $(loader jobs/generic.sbatch | wc -l) -le 20 ]] || fail "jobs/generic.sbatch: more than the body's loader at its end"
for f in "${training[@]}"; do
  diff <(loader jobs/generic.sbatch) <(loader "$f") >/dev/null ||
    fail "$f: its lines that source the body differ from jobs/generic.sbatch's"
  # Above the loader: the shebang, comments, #SBATCH lines and VAR=${VAR:-default} site defaults.
  code=$(sed '/^# ---- common body/,$d' "$f" | sed 1d |
    grep -Ev '^(#.*|[A-Z_]+=\$\{[A-Z_]+:-[^}]*\} *(#.*)?|)$' || true)
  [[ -z $code ]] || fail "$f: code outside the body: $code"
  for v in SITE_ENV LAUNCHER; do grep -q "^$v=\${$v:-" "$f" || fail "$f: no site default for $v"; done
  # Slurm reads #SBATCH lines only above the first command: all of them in the leading comments.
  [[ $(sed -n '2,/^[^#]/p' "$f" | grep -c '^#SBATCH') == $(grep -c '^#SBATCH' "$f") ]] ||
    fail "$f: an #SBATCH line below the first command (Slurm ignores it)"
  for want in "--job-name=mpitron" "--nodes=" "--time=" "--requeue" "--signal=B:USR1@" "--open-mode=append" \
    "--output="; do
    grep -q "^#SBATCH $want" "$f" || fail "$f: no '#SBATCH $want'"
  done
  # Ranks asked for once, per node: an --ntasks in the header caps the command line's
  # -N x --ntasks-per-node. Only RM-shared, one node at most, counts them in all.
  per_node=$(grep -c '^#SBATCH --ntasks-per-node=' "$f" || true)
  total=$(grep -Ec '^#SBATCH (--ntasks=|-n)' "$f" || true)
  if [[ $f == jobs/bridges2-rm-shared.sbatch ]]; then
    if [[ $per_node != 0 || $total != 1 ]] || ! grep -qx '#SBATCH --nodes=1' "$f"; then
      fail "$f: not --ntasks on --nodes=1 (RM-shared is one node at most)"
    fi
  else
    [[ $per_node == 1 && $total == 0 ]] ||
      fail "$f: its header must ask for ranks per node (--ntasks-per-node), not in all (--ntasks)"
  fi
done
grep -qx '#SBATCH --ntasks-per-node=2' jobs/generic.sbatch || fail "jobs/generic.sbatch: not 2 ranks per node by default"
for f in jobs/bridges2-gpu*.sbatch; do
  grep -Eq '^#SBATCH --gpus=v100-32:[1-8]$' "$f" || fail "$f: no --gpus=v100-32:N"
  grep -Eq '^#SBATCH --cpus-per-task=5$' "$f" || fail "$f: no --cpus-per-task=5 (a V100 node's cores per GPU)"
done
echo "training scripts: one body (jobs/train_body.sh), consistent headers, requeue and time-limit warning in each"

# Outside Slurm: a clear refusal, nothing written.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in jobs/*.sbatch jobs/interactive.sh; do
  rc=0
  (cd "$tmp" && env -u SLURM_JOB_ID RUN="$tmp/run" bash "$REPO/$f" train >out.txt 2>err.txt) || rc=$?
  [[ $rc == 1 ]] || fail "$f outside Slurm: exit $rc, expected 1"
  grep -q "^error: .*Slurm" "$tmp/err.txt" || fail "$f outside Slurm: no clear message: $(cat "$tmp/err.txt")"
  [[ ! -e $tmp/run ]] || fail "$f outside Slurm wrote a run folder"
done
# In a job, but with no body where the script looks for it: a clear refusal.
rc=0
(cd "$tmp" && SLURM_JOB_ID=1 MPITRON_ROOT=$tmp/elsewhere bash "$REPO/jobs/generic.sbatch" >out.txt 2>err.txt) || rc=$?
[[ $rc == 1 ]] || fail "jobs/generic.sbatch without its body: exit $rc, expected 1"
grep -q "^error: $tmp/elsewhere/jobs/train_body.sh is missing: submit from the mpitron checkout" "$tmp/err.txt" ||
  fail "jobs/generic.sbatch without its body: no clear message: $(cat "$tmp/err.txt")"
jobs/interactive.sh --help | grep -q "jobs/interactive.sh train" || fail "interactive.sh --help"
echo "outside Slurm: every script refuses"

# make help: every target is explained.
help=$(make -s -f Makefile.slurm help)
targets=$(sed -n 's/^\.PHONY: *//p' Makefile.slurm)
[[ -n $targets ]] || fail "Makefile.slurm has no .PHONY line"
for t in $targets; do
  grep -Eq "^  $t +[a-zA-Z]" <<<"$help" || fail "make -f Makefile.slurm help does not explain '$t'"
done
for v in PARTITION GPUS NODES TIME ACCOUNT DP TP PP CONFIG RUN; do
  grep -q "$v=" <<<"$help" || fail "make help does not explain $v"
done
echo "make help: targets $targets"

# What submit would run.
dry() { make -s -n -f Makefile.slurm "$@"; }
out=$(dry submit PARTITION=GPU NODES=2 ACCOUNT=abc123 RUN=runs/x)
grep -q -- "-p GPU -N 2 --gpus=v100-32:16 --ntasks-per-node=8 --cpus-per-task=5 .*-A abc123 .*jobs/bridges2-gpu.sbatch" <<<"$out" ||
  fail "submit PARTITION=GPU NODES=2: $out"
grep -q "MPITRON_SITE_ENV='jobs/bridges2.env' jobs/submit.sh -p GPU -N 2 " <<<"$out" ||
  fail "submit does not go through jobs/submit.sh's checks with the site profile: $out"
out=$(dry submit PARTITION=GPU-shared GPUS=2 RUN=runs/x)
grep -q -- "-p GPU-shared -N 1 --gpus=v100-32:2 --ntasks-per-node=2 --cpus-per-task=5 .*jobs/bridges2-gpu-shared.sbatch" <<<"$out" ||
  fail "submit PARTITION=GPU-shared GPUS=2: $out"
out=$(dry submit PARTITION=GPU-shared GPUS=1 GPU_TYPE=v100-16 CPUS=2 PRECISION=fp16 RUN=runs/x)
grep -q -- "--gpus=v100-16:1 --ntasks-per-node=1 --cpus-per-task=2 " <<<"$out" ||
  fail "submit GPU_TYPE=v100-16 CPUS=2: $out"
grep -q "DEVICE='' COMM='' PRECISION='fp16'" <<<"$out" || fail "PRECISION not passed through: $out"
out=$(dry submit PARTITION=RM-shared RANKS=8 DP=3 TP=2 PP=5 SCHEDULE=1f1b RUN=runs/x)
grep -q "DP='3' TP='2' PP='5' ZERO='0' SCHEDULE='1f1b'" <<<"$out" || fail "layout not passed through: $out"
grep -q -- "--ntasks=8 .*jobs/bridges2-rm-shared.sbatch" <<<"$out" || fail "submit PARTITION=RM-shared: $out"
out=$(dry submit PARTITION=debug RANKS=3 RUN=runs/x)
grep -q -- "-p debug -N 1 --ntasks=3 .*jobs/generic.sbatch" <<<"$out" || fail "submit PARTITION=debug: $out"
out=$(dry validate RUN=runs/v CTEST_ARGS=-R\ dp2)
grep -q "CTEST_ARGS='-R dp2'.*sbatch" <<<"$out" || fail "validate: $out"
grep -q "jobs/validate.sbatch" <<<"$out" || fail "validate: $out"
out=$(dry validate-gpu RUN=runs/v | tr -d '\\\n')
grep -q "LABEL=gpu .*sbatch.*-p GPU-shared --gpus=v100-32:1 --ntasks=4 .*jobs/validate.sbatch" <<<"$out" ||
  fail "validate-gpu: $out"
echo "make -n submit/validate: resources and layout as documented"

# The Bridges-2 environment file loads the modules the issue names, each editable.
for m in CUDA MPI HDF5; do
  grep -q "^  module load \"\$MPITRON_MODULE_$m\"" jobs/bridges2.env || fail "bridges2.env: no module load for $m"
done
grep -Eq '^MPITRON_MODULE_CUDA=\$\{MPITRON_MODULE_CUDA:-cuda/12\.[0-9.]+\}$' jobs/bridges2.env ||
  fail "bridges2.env: the CUDA module is not pinned to a 12.x release (the last to build sm_70)"

# The build checks nvcc before it starts: a CUDA 13 nvcc (faked here) cannot build the V100s' sm_70.
mkdir -p "$tmp/bin"
cat >"$tmp/bin/nvcc" <<'EOF'
#!/bin/sh
case $1 in
  --version) echo "Cuda compilation tools, release 13.0, V13.0.48" ;;
  --list-gpu-arch) printf 'compute_75\ncompute_90\n' ;;
esac
EOF
chmod +x "$tmp/bin/nvcc"
rc=0
PATH=$tmp/bin:$PATH MPITRON_CUDA_ARCH=70 make -s -f Makefile.slurm build SITE_ENV=none BUILD="$tmp/build" \
  >"$tmp/build.txt" 2>&1 || rc=$?
[[ $rc != 0 ]] || fail "make build with a CUDA 13 nvcc for sm_70 did not stop"
grep -q "error: .*CUDA 13.0, which cannot build sm_70" "$tmp/build.txt" || fail "make build: $(cat "$tmp/build.txt")"
[[ ! -e $tmp/build ]] || fail "make build configured a build with an nvcc that cannot build sm_70"
echo "make build: stops before cmake where nvcc cannot build the GPUs' architecture"
echo "slurm scripts lint ok"
