# shellcheck shell=bash disable=SC2034  # MPITRON, REPO, TINY are for the scripts that source this
# Shared by the end-to-end tests: $MPITRON (binary), $REPO (source tree), $WORK (fresh folder).
set -euo pipefail
MPITRON=$1
REPO=$2
WORK=$3
rm -rf "$WORK"
mkdir -p "$WORK"
WORK=$(realpath "$WORK")
cd "$WORK"
# At exit the hooks (on_exit COMMAND) run, then a passing or skipped test removes its folder (the
# suite's folders came to 4 GB, more than a CI machine's disk has left); a failing one keeps it.
# Fixture set-ups, whose folders later tests read, and MPITRON_KEEP_WORK=1 keep theirs.
exit_hooks=()
on_exit() { exit_hooks+=("$1"); }
finish_work() {
  local rc=$? hook
  for hook in "${exit_hooks[@]}"; do eval "$hook" || true; done
  if [[ ($rc == 0 || $rc == 77) && ${MPITRON_KEEP_WORK:-0} != 1 ]]; then
    cd / && rm -rf "$WORK"
  fi
  return "$rc"
}
trap finish_work EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
# One machine: shared memory only, no probing for UCX or networks (a launch 0.2 s faster).
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
TINY=$REPO/configs/gpt-tiny.toml
# The Python that imports h5py and numpy: CTest hands it over (tests/python.cmake); by hand, the
# same search (tests/find_python.sh). TORCH_PYTHON likewise, empty where none imports torch.
PYTHON=${PYTHON:-$("$REPO/tests/find_python.sh" h5py numpy || echo python3)}
TORCH_PYTHON=${TORCH_PYTHON-$("$REPO/tests/find_python.sh" torch h5py numpy 2>/dev/null || true)}

# A training log's "memory plan:" line: every rank's measured peak within 5% of the plan, or the
# settings have no plan yet (the trainer says why).
check_memory_plan() {
  local line
  line=$(grep -o "memory plan: .*" "$1") || fail "$1 has no memory plan line"
  [[ $line == "memory plan: none: "* ]] && return 0
  awk -v l="$line" 'BEGIN { if (match(l, /within [0-9.]+%/)) { p = substr(l, RSTART + 7, RLENGTH - 8); exit !(p + 0 <= 5) } exit 1 }' ||
    fail "the memory plan is off by more than 5%: $line"
  echo "$line"
}

# The corpus: the Bible where io/get_bible.sh made it, else a synthetic text (so a bare checkout
# still tests everything but convergence on real text).
corpus() {
  if [[ -s $REPO/data/kjv.txt ]]; then
    echo "$REPO/data/kjv.txt"
  else
    "$PYTHON" -c "
import random
r = random.Random(7)
words = 'and the of to in that he shall unto for i his a lord they be is him not them it with all'.split()
print('\n'.join(' '.join(r.choice(words) for _ in range(12)) + '.' for _ in range(40000)))" >corpus.txt
    echo "$WORK/corpus.txt"
  fi
}

# A verse file ("<reference> <text>" lines) for the encoder's classification tasks: the KJV's
# (io/get_bible.sh --references) where the bible program is installed, else a synthetic one whose
# Old Testament verses use other words than its New Testament verses.
verses() {
  if [[ -s $REPO/data/kjv_verses.txt ]]; then
    echo "$REPO/data/kjv_verses.txt"
  elif command -v bible >/dev/null 2>&1 && "$REPO/io/get_bible.sh" verses.txt --references >/dev/null; then
    echo "$WORK/verses.txt"
  else
    "$PYTHON" -c "
import random
r = random.Random(7)
old = 'and the of to in that he shall unto lord israel king house'.split()
new = 'and the of to in that jesus disciples faith grace church spirit'.split()
for i in range(3000):
    book, words = ('Ge', old) if i < 2000 else ('Mat', new)
    print(f'{book}{i // 30 + 1}:{i % 30 + 1} ' + ' '.join(r.choice(words) for _ in range(10)) + '.')" >verses.txt
    echo "$WORK/verses.txt"
  fi
}

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# same A B WHAT: the runs in folders A and B have the same losses, bit for bit (mpitron compare
# --rtol 0), else the test fails saying WHAT.
same() {
  "$MPITRON" compare "$1/trace.h5" "$2/trace.h5" --rtol 0 >/dev/null || fail "$3"
}

# Value of a 1-D trace dataset as text, one number a line.
trace_column() {
  "$PYTHON" -c "
import sys, h5py
with h5py.File(sys.argv[1], 'r') as f:
    for x in f['trace/' + sys.argv[2]][:]: print(repr(float(x)))" "$1" "$2"
}

# expect_error "what it must say" command...: the command must fail (no crash, no hang) with
# exactly one "error: ..." line on stderr that contains the text. A single process prints nothing
# else; under mpiexec (first word of the command) the launcher may add lines of its own.
expect_error() {
  local want=$1
  shift
  local rc=0
  timeout 60 "$@" >out.txt 2>err.txt || rc=$?
  [[ $rc != 0 ]] || fail "'$*' succeeded"
  [[ $rc != 124 ]] || fail "'$*' hung"
  [[ $rc -lt 128 ]] || fail "'$*' crashed (exit $rc): $(cat err.txt)"
  local n
  n=$(grep -c -- "^error: .*$want" err.txt || true)
  [[ $n == 1 ]] || fail "'$*': expected one 'error: ...$want' line, got $n: $(cat err.txt)"
  if [[ $1 != mpiexec ]]; then
    [[ $(grep -c . err.txt) == 1 ]] || fail "'$*': expected one line on stderr: $(cat err.txt)"
  fi
  echo "ok ($rc): $(grep '^error' err.txt)"
}

# Exits 77 (CTest's skip), saying why, unless this build has CUDA and the machine a GPU; leaves
# `mpitron devices`'s lines in devices.txt.
require_gpu() {
  "$MPITRON" devices >devices.txt 2>&1 || true
  if grep -q "built without CUDA" devices.txt; then
    echo "SKIP: this build has no CUDA backend"
    exit 77
  fi
  if ! grep -q "^cuda:0 " devices.txt; then
    echo "SKIP: no GPU on this machine ($(head -1 devices.txt))"
    exit 77
  fi
}
