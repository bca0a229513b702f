"""Independent plain-PyTorch GPT-2 (pre-LN) that reads mpitron checkpoints.

The reference the oracle test and the step benchmark compare mpitron against: the same model
(token + position embedding, pre-LN blocks with fused causal attention and a tanh-GELU MLP, final
LayerNorm, LM head tied to wte, mean cross-entropy), written with ordinary torch modules and
autograd so that it shares no code with the hand-written C++ forward and backward passes.
Parameter names are exactly the checkpoint's (/params/<name>, ARCHITECTURE.md, "Files"), linear weights
(out, in) as nn.Linear stores them. The optimizer is torch.optim.AdamW with mpitron's parameter
groups, learning-rate schedule and global-norm clipping (src/train/adamw.cpp, train_step.cpp).
It also writes and reads this model in Hugging Face's GPT-2 layout (model.safetensors, written by
hand in the safetensors library's byte layout, and config.json) for `mpitron import`'s tests.
"""

from __future__ import annotations

import json
import math
import struct
import tomllib
from dataclasses import dataclass, field

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

LN_EPS = 1e-5


@dataclass
class GptConfig:
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    block_size: int = 64
    vocab_size: int = 256


@dataclass
class TrainConfig:
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 20
    steps: int = 500
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    grad_clip: float = 1.0
    extra: dict = field(default_factory=dict)


def load_toml_config(path: str) -> tuple[GptConfig, TrainConfig]:
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    model = {k: v for k, v in doc.get("model", {}).items() if k != "type"}
    train = doc.get("train", {})
    known = set(TrainConfig.__dataclass_fields__) - {"extra"}
    tc = TrainConfig(**{k: v for k, v in train.items() if k in known})
    tc.extra = {k: v for k, v in train.items() if k not in known}
    return GptConfig(**model), tc


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GptConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        mask = torch.tril(torch.ones(cfg.block_size, cfg.block_size, dtype=torch.bool))
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        scores = scores.masked_fill(~self.mask[:T, :T], float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class Mlp(nn.Module):
    def __init__(self, cfg: GptConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: GptConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=LN_EPS)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=LN_EPS)
        self.mlp = Mlp(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self, cfg: GptConfig):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=LN_EPS)

    def init_weights(self, seed: int = 0) -> None:
        """GPT-2 initialisation (for benchmarks; the oracle loads mpitron's parameters)."""
        g = torch.Generator().manual_seed(seed)
        proj_std = 0.02 / math.sqrt(2 * self.cfg.n_layer)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):
                    p.normal_(0.0, proj_std, generator=g)
                elif p.dim() == 2:
                    p.normal_(0.0, 0.02, generator=g)
                elif ".ln_" in name or name.startswith("ln_f"):
                    p.fill_(1.0 if name.endswith("weight") else 0.0)
                else:
                    p.zero_()

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe.weight[:T]
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


def decayed(name: str, p: torch.Tensor) -> bool:
    """mpitron's weight-decay rule: the 2-D matrices of the linears, not embeddings or vectors."""
    return p.dim() == 2 and name.startswith("h.")


def read_checkpoint(path: str) -> tuple[GptConfig, dict[str, np.ndarray], dict]:
    with h5py.File(path, "r") as f:
        attrs = {k: (v.item() if hasattr(v, "item") else v) for k, v in f.attrs.items()}
        cfg = GptConfig(**{k: int(attrs[f"model.{k}"]) for k in GptConfig.__dataclass_fields__})
        params = {}

        def take(name, obj):
            if isinstance(obj, h5py.Dataset):
                params[name] = obj[()]

        f["params"].visititems(take)
    return cfg, params, attrs


def load_model(path: str, dtype: torch.dtype = torch.float32) -> Gpt:
    """The model of an mpitron checkpoint, every parameter loaded (shapes and names checked)."""
    cfg, params, _ = read_checkpoint(path)
    model = Gpt(cfg).to(dtype)
    own = dict(model.named_parameters())
    missing = sorted(set(own) - set(params))
    extra = sorted(set(params) - set(own))
    if missing or extra:
        raise ValueError(f"{path}: parameters missing {missing[:5]}, unexpected {extra[:5]}")
    with torch.no_grad():
        for name, p in own.items():
            a = params[name]
            if tuple(a.shape) != tuple(p.shape):
                raise ValueError(f"{path}: {name} has shape {a.shape}, expected {tuple(p.shape)}")
            p.copy_(torch.from_numpy(np.asarray(a)).to(dtype))
    return model


def split_tokens(tokens) -> tuple[torch.Tensor, torch.Tensor]:
    t = torch.as_tensor(np.asarray(tokens), dtype=torch.long)
    return t[:, :-1], t[:, 1:]


def logits_and_loss(model: Gpt, tokens) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (B,T,V) and mean token cross-entropy for tokens (B, T+1)."""
    inputs, targets = split_tokens(tokens)
    logits = model(inputs)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    return logits, loss


def loss_and_grads(model: Gpt, tokens) -> tuple[float, np.ndarray, dict[str, np.ndarray]]:
    """Loss, logits and the gradient of the mean loss for every parameter (model left zero-grad)."""
    model.zero_grad(set_to_none=True)
    logits, loss = logits_and_loss(model, tokens)
    loss.backward()
    grads = {n: p.grad.detach().numpy().copy() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return loss.item(), logits.detach().numpy(), grads


def learning_rate(step: int, lr: float, warmup: int, total: int, min_ratio: float) -> float:
    if warmup > 0 and step <= warmup:
        return lr * step / warmup
    if total <= warmup:
        return lr
    min_lr = lr * min_ratio
    if step >= total:
        return min_lr
    progress = (step - warmup) / (total - warmup)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def make_optimizer(model: Gpt, tc: TrainConfig) -> torch.optim.AdamW:
    named = list(model.named_parameters())
    groups = [
        {"params": [p for n, p in named if decayed(n, p)], "weight_decay": tc.weight_decay},
        {"params": [p for n, p in named if not decayed(n, p)], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=tc.lr, betas=(tc.beta1, tc.beta2), eps=tc.eps)


def clip_grad_global_norm(model: Gpt, clip: float) -> float:
    """mpitron's clipping: scale = clip / (norm + 1e-6) only when norm > clip; norm in float64."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads))
    if clip > 0 and norm > clip:
        scale = torch.tensor(clip / (norm + 1e-6), dtype=torch.float32).item()
        for g in grads:
            g.mul_(scale)
    return norm


def train_step(model: Gpt, opt: torch.optim.Optimizer, tokens, step: int, tc: TrainConfig) -> dict:
    """One optimizer step (1-based `step`) on tokens (B, T+1); returns loss, grad_norm and lr."""
    lr = learning_rate(step, tc.lr, tc.warmup_steps, tc.steps, tc.min_lr_ratio)
    for g in opt.param_groups:
        g["lr"] = lr
    opt.zero_grad(set_to_none=True)
    _, loss = logits_and_loss(model, tokens)
    loss.backward()
    norm = clip_grad_global_norm(model, tc.grad_clip)
    opt.step()
    return {"loss": loss.item(), "grad_norm": norm, "lr": lr}


# ---- Hugging Face GPT-2 layout (safetensors written by hand: no safetensors module needed) ----

HF_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
_ST_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16}


def randomize(model: Gpt, seed: int) -> None:
    """Every parameter random (LayerNorm weights near 1, biases small, not zero), so that a wrong
    mapping of any tensor changes the logits."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if ".ln_" in name or name.startswith("ln_f"):
                p.copy_(1.0 + 0.1 * noise if name.endswith("weight") else 0.05 * noise)
            else:
                p.copy_((0.02 if p.dim() == 2 else 0.05) * noise)


def to_bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounding to nearest even."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def from_bf16_bits(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def write_safetensors(path, tensors: dict, metadata: dict | None = None) -> None:
    """The safetensors library's layout: u64 little-endian header length, compact JSON header
    (__metadata__ first, tensors by decreasing alignment then name), spaces to a multiple of 8,
    data. Values: numpy arrays (F32/F64/F16) or ("BF16", uint16 bit array)."""
    entries = []
    for name, v in tensors.items():
        dtype, a = v if isinstance(v, tuple) else (
            {np.float32: "F32", np.float64: "F64", np.float16: "F16"}[v.dtype.type], v)
        entries.append((name, dtype, np.ascontiguousarray(a)))
    entries.sort(key=lambda e: (-e[2].dtype.itemsize, e[0]))
    header, offset = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, a in entries:
        header[name] = {"dtype": dtype, "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, a in entries:
            f.write(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes())


def read_safetensors(path) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file as float32 (F32, F64, F16, BF16)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, t = e["data_offsets"]
        raw = data[b:t]
        if e["dtype"] == "BF16":
            a = from_bf16_bits(np.frombuffer(raw, dtype="<u2"))
        else:
            a = np.frombuffer(raw, dtype=np.dtype(_ST_DTYPES[e["dtype"]]).newbyteorder("<"))
        out[name] = a.astype(np.float32).reshape(e["shape"])
    return out


def hf_config(cfg: GptConfig) -> dict:
    return {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
            "layer_norm_epsilon": LN_EPS, "model_type": "gpt2", "n_ctx": cfg.block_size,
            "n_embd": cfg.n_embd, "n_head": cfg.n_head, "n_inner": None, "n_layer": cfg.n_layer,
            "n_positions": cfg.block_size, "vocab_size": cfg.vocab_size}


def write_hf_model(folder, model: Gpt, prefix: str = "transformer.", mask_buffers: bool = True,
                   lm_head: bool = False, dtype: str = "F32", metadata: dict | None = None) -> None:
    """model.safetensors and config.json as transformers' GPT2LMHeadModel has them: Conv1D
    weights (in, out), names with `prefix`, optionally the causal-mask buffers older files carry
    and an explicit lm_head.weight (a copy of wte)."""
    from pathlib import Path
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for name, p in model.named_parameters():
        a = p.detach().numpy().astype(np.float32)
        if name.endswith(HF_CONV1D):
            a = a.T
        if dtype == "BF16":
            tensors[prefix + name] = ("BF16", to_bf16_bits(a))
        else:
            tensors[prefix + name] = a.astype({"F32": np.float32, "F16": np.float16,
                                               "F64": np.float64}[dtype])
    if lm_head:
        tensors["lm_head.weight"] = tensors[prefix + "wte.weight"]
    if mask_buffers:
        T = model.cfg.block_size
        for i in range(model.cfg.n_layer):
            tensors[f"{prefix}h.{i}.attn.bias"] = np.tril(np.ones((T, T), np.float32))[None, None]
    write_safetensors(folder / "model.safetensors", tensors,
                      {"format": "pt"} if metadata is None else metadata)
    (folder / "config.json").write_text(json.dumps(hf_config(model.cfg), indent=2) + "\n")


def load_hf_model(folder, dtype: torch.dtype = torch.float32) -> Gpt:
    """This module's Gpt from a Hugging Face GPT-2 folder (Conv1D weights transposed back)."""
    from pathlib import Path
    folder = Path(folder)
    c = json.loads((folder / "config.json").read_text())
    cfg = GptConfig(n_layer=c["n_layer"], n_head=c["n_head"], n_embd=c["n_embd"],
                    block_size=c["n_positions"], vocab_size=c["vocab_size"])
    tensors = {k.removeprefix("transformer."): v
               for k, v in read_safetensors(folder / "model.safetensors").items()}
    model = Gpt(cfg).to(dtype)
    with torch.no_grad():
        for name, p in model.named_parameters():
            a = tensors[name]
            p.copy_(torch.from_numpy(np.ascontiguousarray(a.T if name.endswith(HF_CONV1D) else a)))
    return model
