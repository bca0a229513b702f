#!/usr/bin/env bash
# 8-bit AdamW (--optimizer adamw8bit) across ZeRO shards and checkpoints, gpt-tiny for 10 steps:
# - dp 2 --zero 1 (each rank updates and checkpoints its own whole blocks) gives the bits of
#   dp 2 --zero 0 (every rank updates every block): the loss trace, the final parameters and the
#   8-bit state in the checkpoints (/optim8bit: uint8 codes, float32 absmax) are identical;
# - at one rank the trace follows within 1e-4 (dp 2 sums gradients in another order, which fp32
#   already shows at 1e-6 and the 8-bit codes amplify);
# - resuming a checkpoint continues bit-identically: one rank from step 5, and dp 2 --zero 0
#   from the --zero 1 run's step 5 (the state read back from other shards);
# - the MLP (fashion-mnist, where installed) resumes bit-identically too;
# - a checkpoint holds its optimizer: resuming with the other --optimizer, or an 8-bit one at
#   another tp, or over another flat layout (as another device's vocabulary padding makes), is
#   refused.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)
args=(train --config "$TINY" --data "$data" --steps 10 --batch-size 8 --seq-len 32 --dropout 0.1
  --eval-every 5 --eval-batches 1 --log-every 0 --warmup-steps 3 --lr 1e-3 --ckpt-every 5
  --optimizer adamw8bit)
mpiexec -n 1 "$MPITRON" "${args[@]}" --out one
mpiexec -n 2 "$MPITRON" "${args[@]}" --dp 2 --zero 0 --out zero0
mpiexec -n 2 "$MPITRON" "${args[@]}" --dp 2 --zero 1 --out zero1

"$MPITRON" compare zero0/trace.h5 zero1/trace.h5 --rtol 0 || fail "--zero 1 differs from --zero 0"
for group in /params /optim8bit; do
  h5diff zero0/ckpt_10.h5 zero1/ckpt_10.h5 $group $group ||
    fail "the checkpoints' $group differ between --zero 0 and --zero 1"
done
"$PYTHON" - zero1/ckpt_10.h5 <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    assert f.attrs["optimizer"] in (b"adamw8bit", "adamw8bit"), f.attrs["optimizer"]
    assert "optim" not in f, "fp32 moments written by an 8-bit run"
    g = f["optim8bit/pp0_tp0"]
    n = f["optim8bit/pp0_tp0/m_codes"].shape[0]
    assert n % 256 == 0 and g["m_absmax"].shape == (n // 256,), "state not in whole blocks"
    for name in ("m_codes", "v_codes"):
        assert g[name].dtype == "uint8", f"{name} is {g[name].dtype}"
        assert len(set(g[name][:].tolist())) > 100, f"{name} uses few codes"
    assert g["v_absmax"][:].max() > 0 and g["m_absmax"].dtype == "float32"
PY
"$MPITRON" compare one/trace.h5 zero1/trace.h5 --rtol 1e-4 || fail "dp 2 strays from one rank"

mkdir -p resumed_one resumed_zero0
cp one/trace.h5 one/ckpt_5.h5 resumed_one/
mpiexec -n 1 "$MPITRON" "${args[@]}" --out resumed_one --resume resumed_one/ckpt_5.h5
"$MPITRON" compare one/trace.h5 resumed_one/trace.h5 --rtol 0 || fail "resumed run differs"
h5diff one/ckpt_10.h5 resumed_one/ckpt_10.h5 /optim8bit /optim8bit || fail "resumed state differs"
cp zero1/trace.h5 zero1/ckpt_5.h5 resumed_zero0/
mpiexec -n 2 "$MPITRON" "${args[@]}" --dp 2 --zero 0 --out resumed_zero0 \
  --resume resumed_zero0/ckpt_5.h5
"$MPITRON" compare zero1/trace.h5 resumed_zero0/trace.h5 --rtol 0 ||
  fail "the --zero 1 checkpoint resumed at --zero 0 differs"

no_adamw=("${args[@]}")
no_adamw[${#no_adamw[@]} - 1]=adamw
expect_error "trained with --optimizer adamw8bit" \
  "$MPITRON" "${no_adamw[@]}" --out refused --resume one/ckpt_5.h5
"$MPITRON" "${no_adamw[@]}" --steps 2 --ckpt-every 2 --eval-every 0 --out fp32
expect_error "trained with --optimizer adamw, this run asks for --optimizer adamw8bit" \
  "$MPITRON" "${args[@]}" --out refused --resume fp32/ckpt_2.h5
expect_error "resume it at --tp 1 --pp 1" \
  mpiexec -n 2 "$MPITRON" "${args[@]}" --tp 2 --out refused --resume one/ckpt_5.h5
# The flat layout the blocks index is recorded ("pp0_tp0 <elements>"); one moved as CUDA's padding
# of the vocabulary to 128 rows moves it (127 rows of 128) is refused.
cp one/ckpt_5.h5 moved.h5
"$PYTHON" - moved.h5 <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    sizes = f.attrs["optim8bit.flat_sizes"]
    sizes = sizes.decode() if isinstance(sizes, bytes) else sizes
    name, n = sizes.split(" ")
    assert name == "pp0_tp0" and int(n) > 0, sizes
    f.attrs["optim8bit.flat_sizes"] = f"{name} {int(n) + 127 * 128}"
PY
expect_error "another device's padding moves them" \
  "$MPITRON" "${args[@]}" --out refused --resume moved.h5
# Another family through the same trainer: the MLP resumes bit-identically too.
fmnist=/usr/share/datasets/fashion-mnist
if [[ -e $fmnist/train-images-idx3-ubyte.gz ]]; then
  mlp=(train --config "$REPO/configs/mlp-fmnist.toml" --data "$fmnist" --batch-size 48 --steps 6
    --eval-every 3 --eval-batches 1 --log-every 0 --warmup-steps 2 --ckpt-every 3
    --optimizer adamw8bit)
  "$MPITRON" "${mlp[@]}" --out mlp
  mkdir -p mlp_resumed
  cp mlp/trace.h5 mlp/ckpt_3.h5 mlp_resumed/
  "$MPITRON" "${mlp[@]}" --out mlp_resumed --resume mlp_resumed/ckpt_3.h5
  "$MPITRON" compare mlp/trace.h5 mlp_resumed/trace.h5 --rtol 0 || fail "the MLP's resume differs"
fi
echo "adamw8bit layouts ok"
