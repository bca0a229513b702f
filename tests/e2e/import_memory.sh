#!/usr/bin/env bash
# mpitron import streams the checkpoint: a GPT-2-shaped model of about 330 MB of float32 weights
# imports with a peak resident set at most 0.1x the weights above that of `import --plan` on the
# same model (the same start-up and mapped file, no tensor read), and the checkpoint holds the
# tensors of each kind bitwise (pretrained.sh checks every tensor of a small model). Any write
# holds HDF5's copies of one 4 MiB chunk (about 24 MiB in all): the model is large enough for that
# to stay under 0.1x (it is 0.11x at 230 MB).
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
if ! "$PYTHON" -c 'import h5py, numpy' 2>/dev/null; then
  echo "SKIP: no python imports h5py and numpy (PYTHON='$PYTHON'; tests/python.cmake)"
  exit 77
fi

# The model, written with numpy alone (torch is slow to start): vocabulary 50257 as GPT-2's, so
# wte is 39% of the weights and a tensor held whole would show; mlp weights span two chunks.
"$PYTHON" - <<'PYEOF'
import json, pathlib, struct
import numpy as np
L, E, V, T = 10, 640, 50257, 1024
shapes = {"wte.weight": (V, E), "wpe.weight": (T, E), "ln_f.weight": (E,), "ln_f.bias": (E,)}
for i in range(L):
    for n, s in {"ln_1.weight": (E,), "ln_1.bias": (E,), "attn.c_attn.weight": (E, 3 * E),
                 "attn.c_attn.bias": (3 * E,), "attn.c_proj.weight": (E, E),
                 "attn.c_proj.bias": (E,), "ln_2.weight": (E,), "ln_2.bias": (E,),
                 "mlp.c_fc.weight": (E, 4 * E), "mlp.c_fc.bias": (4 * E,),
                 "mlp.c_proj.weight": (4 * E, E), "mlp.c_proj.bias": (E,)}.items():
        shapes[f"h.{i}.{n}"] = s
header, offset = {"__metadata__": {"format": "pt"}}, 0
for name in sorted(shapes):
    n = int(np.prod(shapes[name]))
    header[name] = {"dtype": "F32", "shape": list(shapes[name]),
                    "data_offsets": [offset, offset + 4 * n]}
    offset += 4 * n
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * ((8 - len(text) % 8) % 8)
folder = pathlib.Path("hf")
folder.mkdir()
with open(folder / "model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text)
    np.random.default_rng(3).random(offset // 4, dtype=np.float32).tofile(f)
(folder / "config.json").write_text(json.dumps({
    "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "model_type": "gpt2",
    "n_embd": E, "n_head": 8, "n_layer": L, "n_positions": T, "vocab_size": V}))
print(f"model: {len(shapes)} tensors, {offset / 2**20:.1f} MiB of float32")
PYEOF

# Peak resident set (the child's ru_maxrss, its helpers included) of each command.
"$PYTHON" - "$MPITRON" <<'PYEOF' || fail "import held more than 0.1x the weights"
import os, sys
mpitron = sys.argv[1]
def peak_bytes(*args):
    out = os.open("/dev/null", os.O_WRONLY)
    pid = os.posix_spawn(mpitron, [mpitron, *args], os.environ,
                         file_actions=[(os.POSIX_SPAWN_DUP2, out, 1)])
    _, status, usage = os.wait4(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"mpitron {' '.join(args)} failed"
    return usage.ru_maxrss * 1024
weights = os.path.getsize("hf/model.safetensors")
plan = peak_bytes("import", "--from", "hf", "--plan")
imported = peak_bytes("import", "--from", "hf", "--out", "imported.h5")
over = (imported - plan) / weights
mib = lambda b: f"{b / 2**20:.1f} MiB"
print(f"peak resident: import {mib(imported)}, import --plan {mib(plan)}; weights {mib(weights)}: "
      f"the import holds {mib(imported - plan)} = {over:.3f}x the weights beyond the plan "
      f"(limit 0.1x; import / weights = {imported / weights:.2f})")
sys.exit(0 if over <= 0.1 else 1)
PYEOF

"$PYTHON" - <<'PYEOF' || fail "the imported checkpoint differs from the model"
import json, struct
import h5py, numpy as np
with open("hf/model.safetensors", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
data = np.memmap("hf/model.safetensors", dtype=np.float32, mode="r", offset=8 + n)
conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
with h5py.File("imported.h5", "r") as f:
    params = f["params"]
    # wte in place over many chunks, Conv1D weights transposed over one and two, a bias, the last.
    names = ["wte.weight", "h.0.attn.c_attn.weight", "h.5.mlp.c_fc.weight",
             "h.9.mlp.c_proj.weight", "h.9.mlp.c_proj.bias", "ln_f.weight"]
    stored = len(params)
    assert sorted(params) == sorted(k for k in header if k != "__metadata__")
    for name in names:
        e = header[name]
        a = data[e["data_offsets"][0] // 4:e["data_offsets"][1] // 4].reshape(e["shape"])
        if name.endswith(conv1d):
            a = a.T
        b = params[name][()]
        assert b.shape == a.shape and np.array_equal(a, b), name
        assert params[name].fletcher32, name
print(f"all {stored} tensors there, {', '.join(names)} bitwise")
PYEOF
echo "import memory ok"
