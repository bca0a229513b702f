# shellcheck shell=bash
# Sourced by staged_device.sh and staged_device_matrix.sh: each layout in STAGED_LAYOUTS at dp 2
# on the CPU and on --device cpu-staged, whose losses must be equal bit for bit.
# shellcheck disable=SC2154  # common is the caller's
for layout in "${STAGED_LAYOUTS[@]}"; do
  name=$(echo "$layout" | tr -d ' -')
  read -ra flags <<<"$layout"
  mpiexec -n 2 "$MPITRON" train "${common[@]}" --dp 2 "${flags[@]}" --out "cpu_$name" >/dev/null
  mpiexec -n 2 "$MPITRON" train "${common[@]}" --dp 2 "${flags[@]}" --device cpu-staged \
    --out "staged_$name" >/dev/null
  same "cpu_$name" "staged_$name" "cpu-staged at dp 2 ($layout) differs from the cpu"
done
