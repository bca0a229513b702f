#!/usr/bin/env bash
# The shell twin of tests/python.cmake, for what runs outside CTest (make main, bench/, jobs/, an
# e2e script started by hand): prints the first interpreter that imports every module named,
# trying $PYTHON, then python3 on PATH, then /usr/bin/python3; exits 1 with a line on stderr when
# none does. Usage: tests/find_python.sh [MODULE...]   (default: h5py numpy)
set -euo pipefail
modules=("$@")
[[ ${#modules[@]} -gt 0 ]] || modules=(h5py numpy)
imports=$(IFS=,; echo "${modules[*]}")
tried=()
for candidate in "${PYTHON:-}" "$(command -v python3 || true)" /usr/bin/python3; do
  [[ -n $candidate && -x $candidate ]] || continue
  if "$candidate" -c "import $imports" >/dev/null 2>&1; then
    echo "$candidate"
    exit 0
  fi
  tried+=("$candidate")
done
echo "error: no python imports ${imports//,/, } (tried: ${tried[*]:-none}; set PYTHON)" >&2
exit 1
