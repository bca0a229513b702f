#!/usr/bin/env bash
# --recompute block keeps only each transformer block's input (the previous block's output) per
# micro-batch in flight and recomputes the block in backward: the losses are bit for bit those of
# --recompute none, and the peak memory is lower (at 1 rank, and in a GPipe pipeline that holds
# every micro-batch). Families without transformer blocks refuse it.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)
common=(--config "$TINY" --data "$data" --steps 6 --log-every 0 --eval-every 3 --eval-batches 1)
for r in none block; do
  "$MPITRON" train "${common[@]}" --recompute "$r" --out "one_$r" >/dev/null
  mpiexec -n 2 "$MPITRON" train "${common[@]}" --recompute "$r" --pp 2 --schedule gpipe \
    --micro-batches 4 --out "pp_$r" >/dev/null
done
"$MPITRON" compare one_none/trace.h5 one_block/trace.h5 --rtol 0 || fail "recompute changed the losses"
"$MPITRON" compare pp_none/trace.h5 pp_block/trace.h5 --rtol 0 ||
  fail "recompute changed the pipeline's losses"
"$PYTHON" - <<'PY'
import h5py
def peak(run):
    with h5py.File(f"{run}/trace.h5", "r") as f:
        assert f.attrs["layout.recompute"] in ("none", "block")
        return int(f["trace/rank_peak_mem_bytes"][-1].max())
for run in ("one", "pp"):
    none, block = peak(f"{run}_none"), peak(f"{run}_block")
    print(f"{run}: peak bytes per rank {none} without recompute, {block} with ({block / none:.2f})")
    assert block < 0.75 * none, f"{run}: recompute saved less than a quarter of the peak"
PY
expect_error "--recompute block is for the GPT's transformer blocks; the mlp family" \
  "$MPITRON" train --config "$REPO/configs/mlp-fmnist.toml" --steps 1 --recompute block --out bad
echo "recompute ok"
