"""Independent plain-PyTorch BERT encoder (mpitron's "bert" family) that reads mpitron checkpoints.

The reference validate/bert_oracle_test.py compares mpitron's encoder against, written from the
family's specification with ordinary torch modules (nn.Embedding, nn.Linear, F.layer_norm) and
autograd, so that it shares no code with the hand-written C++ forward and backward passes (and
not with Hugging Face transformers either, which is not used):
  e = word[ids] + pos[0..T) + type[token_types]; h = LN_emb(e)
  per layer (post-LN, as BERT): q, k, v = h W^T + b; NH heads of HS = C/NH features (head j =
      features [j*HS, (j+1)*HS)); scores = q k^T / sqrt(HS); keys at positions >= length[b] get
      probability exactly 0 for every query (queries at padded positions are computed normally
      over the valid keys); a = softmax(scores) v, heads side by side;
      h1 = LN_att(h + a Wo^T + bo); h = LN_out(h1 + gelu(h1 Wi^T + bi) Wo2^T + bo2)
  task 0 (masked LM): at the masked positions (per sample in position order, samples in order)
      t = LN_t(gelu(h Wt^T + bt)); logits = t word^T + cls.predictions.bias (decoder tied to the
      word embeddings); loss = mean cross-entropy over every masked position of the batch
  tasks 1, 2 (2 classes): pooled = tanh(h[:, 0] Wp^T + bp); logits = pooled Wc^T + bc; loss =
      mean cross-entropy over the samples
Every LayerNorm has eps 1e-12 and biased variance; GELU is the exact erf form; no dropout.
Parameter names are exactly the checkpoint's (/params/<name>, Hugging Face's BertModel naming),
linear weights (out, in). Task 0 has the cls.predictions.* parameters and no pooler/classifier;
tasks 1 and 2 the reverse.

The Bert constructor also takes deliberately wrong options (pre_ln, gelu="tanh", mask_padding=False,
ln_eps, token_types=False): only for the oracle's check that a wrong reference is told apart.
`self_test()` checks this model on its own (gradcheck in float64, padding-mask invariance, a
loop-by-loop numpy forward of the specification, torch's nn.TransformerEncoderLayer).
Usage: model = bert_torch.load_model("ckpt_0.h5", torch.float64);
loss_and_grads(model, inputs, token_types, lengths, targets).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

LN_EPS = 1e-12
MLM_FRACTION = 0.15
CLASSES = 2


@dataclass
class BertConfig:
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    block_size: int = 64
    vocab_size: int = 261
    type_vocab: int = 2
    task: int = 0
    pad_id: int = 256
    unk_id: int = 257
    cls_id: int = 258
    sep_id: int = 259
    mask_id: int = 260


def masked_count(T: int) -> int:
    """m = max(1, round(0.15 (T - 2))), rounding halves away from zero (C++ std::round)."""
    x = MLM_FRACTION * (T - 2)
    return max(1, int(math.floor(x + 0.5)))


def gelu(x: torch.Tensor, kind: str = "erf") -> torch.Tensor:
    if kind == "erf":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    if kind == "tanh":  # GPT-2's approximation: a wrong reference for BERT
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    raise ValueError(kind)


class LayerNorm(nn.Module):
    def __init__(self, n: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


class Options:
    """How the model computes: the specification by default; the others are wrong on purpose."""

    def __init__(self, pre_ln: bool = False, gelu: str = "erf", mask_padding: bool = True,
                 ln_eps: float = LN_EPS, token_types: bool = True):
        self.pre_ln, self.gelu, self.mask_padding = pre_ln, gelu, mask_padding
        self.ln_eps, self.token_types = ln_eps, token_types


class Embeddings(nn.Module):
    def __init__(self, cfg: BertConfig, o: Options):
        super().__init__()
        self.o = o
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.position_embeddings = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab, cfg.n_embd)
        self.LayerNorm = LayerNorm(cfg.n_embd, o.ln_eps)

    def forward(self, ids: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        T = ids.shape[1]
        if not self.o.token_types:
            types = torch.zeros_like(types)
        e = (self.word_embeddings(ids) + self.position_embeddings.weight[:T]
             + self.token_type_embeddings(types))
        return e if self.o.pre_ln else self.LayerNorm(e)


class SelfAttention(nn.Module):
    def __init__(self, cfg: BertConfig, o: Options):
        super().__init__()
        self.n_head, self.o = cfg.n_head, o
        self.query = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.key = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.value = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, h: torch.Tensor, key_valid: torch.Tensor) -> torch.Tensor:
        B, T, C = h.shape
        hs = C // self.n_head

        def heads(x):  # (B, T, C) -> (B, NH, T, HS): head j = features [j*HS, (j+1)*HS)
            return x.view(B, T, self.n_head, hs).transpose(1, 2)

        q, k, v = heads(self.query(h)), heads(self.key(h)), heads(self.value(h))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        if self.o.mask_padding:  # key_valid (B, T): keys past the length get probability 0
            scores = scores.masked_fill(~key_valid[:, None, None, :], float("-inf"))
        a = torch.softmax(scores, dim=-1) @ v
        return a.transpose(1, 2).reshape(B, T, C)


class Dense(nn.Module):
    """A linear (out, in) and the LayerNorm after the residual sum: BERT's *Output modules."""

    def __init__(self, n_in: int, n_out: int, eps: float):
        super().__init__()
        self.dense = nn.Linear(n_in, n_out)
        self.LayerNorm = LayerNorm(n_out, eps)


class Attention(nn.Module):
    def __init__(self, cfg: BertConfig, o: Options):
        super().__init__()
        self.self = SelfAttention(cfg, o)
        self.output = Dense(cfg.n_embd, cfg.n_embd, o.ln_eps)


class Intermediate(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)


class Layer(nn.Module):
    def __init__(self, cfg: BertConfig, o: Options):
        super().__init__()
        self.o = o
        self.attention = Attention(cfg, o)
        self.intermediate = Intermediate(cfg)
        self.output = Dense(4 * cfg.n_embd, cfg.n_embd, o.ln_eps)

    def forward(self, h: torch.Tensor, key_valid: torch.Tensor) -> torch.Tensor:
        att, out, g = self.attention, self.output, self.o.gelu
        if self.o.pre_ln:  # GPT-2's arrangement: a wrong reference for BERT
            h = h + att.output.dense(att.self(att.output.LayerNorm(h), key_valid))
            return h + out.dense(gelu(self.intermediate.dense(out.LayerNorm(h)), g))
        h1 = att.output.LayerNorm(h + att.output.dense(att.self(h, key_valid)))
        return out.LayerNorm(h1 + out.dense(gelu(self.intermediate.dense(h1), g)))


class Encoder(nn.Module):
    def __init__(self, cfg: BertConfig, o: Options):
        super().__init__()
        self.layer = nn.ModuleList(Layer(cfg, o) for _ in range(cfg.n_layer))


class Transform(nn.Module):
    def __init__(self, cfg: BertConfig, o: Options):
        super().__init__()
        self.dense = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.LayerNorm = LayerNorm(cfg.n_embd, o.ln_eps)


class Predictions(nn.Module):
    def __init__(self, cfg: BertConfig, o: Options):
        super().__init__()
        self.transform = Transform(cfg, o)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))  # decoder weight: word embeddings


class MlmHead(nn.Module):
    def __init__(self, cfg: BertConfig, o: Options):
        super().__init__()
        self.predictions = Predictions(cfg, o)


class Pooler(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.n_embd, cfg.n_embd)


class Bert(nn.Module):
    def __init__(self, cfg: BertConfig, **options):
        super().__init__()
        if cfg.task not in (0, 1, 2):
            raise ValueError(f"model.task {cfg.task} is not 0, 1 or 2")
        if cfg.n_embd % cfg.n_head:
            raise ValueError(f"n_embd {cfg.n_embd} is not a multiple of n_head {cfg.n_head}")
        self.cfg = cfg
        self.o = o = Options(**options)
        self.embeddings = Embeddings(cfg, o)
        self.encoder = Encoder(cfg, o)
        if cfg.task == 0:
            self.cls = MlmHead(cfg, o)
        else:
            self.pooler = Pooler(cfg)
            self.classifier = nn.Linear(cfg.n_embd, CLASSES)

    def hidden(self, ids: torch.Tensor, types: torch.Tensor, lengths: torch.Tensor
               ) -> torch.Tensor:
        """The encoder's output (B, T, C)."""
        T = ids.shape[1]
        key_valid = torch.arange(T, device=ids.device)[None, :] < lengths[:, None]
        h = self.embeddings(ids, types)
        for layer in self.encoder.layer:
            h = layer(h, key_valid)
        if self.o.pre_ln:  # the wrong pre-LN reference normalises at the end, as GPT-2 does
            h = self.embeddings.LayerNorm(h)
        return h

    def forward(self, ids, types, lengths, targets) -> tuple[torch.Tensor, torch.Tensor]:
        """ids, types (B, T); lengths (B); targets: task 0 (B, T), the original id at masked
        positions and -1 elsewhere, tasks 1, 2 (B) labels. Returns logits (task 0 (B, m, V), the
        masked positions in order; tasks 1, 2 (B, 1, 2)) and the mean cross-entropy."""
        h = self.hidden(ids, types, lengths)
        B = ids.shape[0]
        if self.cfg.task == 0:
            masked = targets >= 0
            counts = masked.sum(dim=1)
            if not bool((counts == counts[0]).all()) or int(counts[0]) == 0:
                raise ValueError(f"masked positions per sample {counts.tolist()} are not one "
                                 "positive count")
            t = self.cls.predictions.transform
            x = h[masked]  # row-major: samples in order, each in position order
            x = t.LayerNorm(gelu(t.dense(x), self.o.gelu))
            logits = x @ self.embeddings.word_embeddings.weight.t() + self.cls.predictions.bias
            loss = F.cross_entropy(logits, targets[masked])
            return logits.reshape(B, int(counts[0]), -1), loss
        pooled = torch.tanh(self.pooler.dense(h[:, 0]))
        logits = self.classifier(pooled)
        return logits[:, None, :], F.cross_entropy(logits, targets)


# ---- checkpoints ------------------------------------------------------------------------------

def read_checkpoint(path: str) -> tuple[BertConfig, dict[str, np.ndarray], dict]:
    """(config, params, root attributes) of an mpitron checkpoint of the bert family."""
    with h5py.File(path, "r") as f:
        attrs = {k: (v.item() if hasattr(v, "item") else v) for k, v in f.attrs.items()}
        kind = attrs.get("model.type")
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        if kind != "bert":
            raise ValueError(f"{path}: model.type is {kind!r}, not 'bert'")
        cfg = BertConfig()
        for k in BertConfig.__dataclass_fields__:
            if f"model.{k}" not in attrs:
                raise ValueError(f"{path}: attribute model.{k} is missing")
            setattr(cfg, k, int(attrs[f"model.{k}"]))
        params = {}
        f["params"].visititems(lambda n, o: params.__setitem__(n, o[()])
                               if isinstance(o, h5py.Dataset) else None)
    return cfg, params, attrs


def load_model(path: str, dtype: torch.dtype = torch.float32, **options) -> Bert:
    """The model of an mpitron checkpoint, every parameter loaded (the name sets must be equal,
    shapes checked). options: the deliberately wrong variants (Options)."""
    cfg, params, _ = read_checkpoint(path)
    model = Bert(cfg, **options).to(dtype)
    own = dict(model.named_parameters())
    missing = sorted(set(own) - set(params))
    extra = sorted(set(params) - set(own))
    if missing or extra:
        raise ValueError(f"{path}: parameters missing {missing}, unexpected {extra}")
    with torch.no_grad():
        for name, p in own.items():
            a = params[name]
            if tuple(a.shape) != tuple(p.shape):
                raise ValueError(f"{path}: {name} has shape {a.shape}, expected {tuple(p.shape)}")
            p.copy_(torch.from_numpy(np.asarray(a)).to(dtype))
    return model


def as_long(a) -> torch.Tensor:
    return torch.as_tensor(np.rint(np.asarray(a, dtype=np.float64)).astype(np.int64))


def loss_and_grads(model: Bert, inputs, types, lengths, targets
                   ) -> tuple[float, np.ndarray, dict[str, np.ndarray]]:
    """Loss, logits and the gradient of the mean loss for every parameter (model left zero-grad).
    The arguments may be float arrays holding integers (as mpitron's dump stores them)."""
    model.zero_grad(set_to_none=True)
    logits, loss = model(as_long(inputs), as_long(types), as_long(lengths), as_long(targets))
    loss.backward()
    grads = {n: (p.grad.detach().numpy().copy() if p.grad is not None
                 else np.zeros(tuple(p.shape), dtype=p.detach().numpy().dtype))
             for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return loss.item(), logits.detach().numpy(), grads


def classification_inputs(rows: np.ndarray, cfg: BertConfig
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What a task 1/2 row (T+1) means: ids row[0..T), length = tokens before the first [PAD],
    token type 1 after the first [SEP] (not padding), label row[T]."""
    rows = np.asarray(rows, dtype=np.int64)
    B, T = rows.shape[0], rows.shape[1] - 1
    ids, labels = rows[:, :T], rows[:, T]
    types, lengths = np.zeros((B, T), np.int64), np.zeros(B, np.int64)
    for b in range(B):
        pad = np.nonzero(ids[b] == cfg.pad_id)[0]
        lengths[b] = pad[0] if pad.size else T
        sep = np.nonzero(ids[b, :lengths[b]] == cfg.sep_id)[0]
        if sep.size:
            types[b, sep[0] + 1:lengths[b]] = 1
    return ids, types, lengths, labels


def mlm_unmasked_inputs(rows: np.ndarray, cfg: BertConfig) -> np.ndarray:
    """[CLS] row[0..T-2) [SEP] (B, T) for task-0 rows (B, T+1), before masking."""
    rows = np.asarray(rows, dtype=np.int64)
    B, T = rows.shape[0], rows.shape[1] - 1
    out = np.empty((B, T), np.int64)
    out[:, 0], out[:, 1:T - 1], out[:, T - 1] = cfg.cls_id, rows[:, :T - 2], cfg.sep_id
    return out


def randomize(model: Bert, seed: int, scale: float = 1.0) -> None:
    """Every parameter random at sizes where each part of the model matters: LayerNorm weights
    near 1, biases small but not zero, linear weights ~ 1.2 / sqrt(in) * scale (GELU inputs of
    order 1, where erf and tanh forms differ), embeddings ~ 0.5."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype)
            if ".LayerNorm." in name:
                p.copy_(1.0 + 0.2 * noise if name.endswith("weight") else 0.1 * noise)
            elif "embeddings" in name:
                p.copy_(0.5 * noise)
            elif p.dim() == 2:
                p.copy_(1.2 * scale / math.sqrt(p.shape[1]) * noise)
            else:
                p.copy_(0.1 * noise)


# ---- self-tests (the reference checked on its own) ------------------------------------------

def _numpy_forward(model: Bert, ids, types, lengths, targets) -> tuple[np.ndarray, float]:
    """The specification computed loop by loop in float64 numpy (sample, head, query, key)."""
    P = {n: p.detach().double().numpy() for n, p in model.named_parameters()}
    cfg = model.cfg
    C, NH = cfg.n_embd, cfg.n_head
    HS = C // NH
    erf = np.vectorize(math.erf)

    def ln(x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + LN_EPS) * P[name + ".weight"] + P[name + ".bias"]

    def lin(x, name):
        return x @ P[name + ".weight"].T + P[name + ".bias"]

    def g(x):
        return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))

    logits_all, losses = [], []
    B, T = ids.shape
    for b in range(B):
        L = int(lengths[b])
        h = np.stack([P["embeddings.word_embeddings.weight"][ids[b, t]]
                      + P["embeddings.position_embeddings.weight"][t]
                      + P["embeddings.token_type_embeddings.weight"][types[b, t]]
                      for t in range(T)])
        h = ln(h, "embeddings.LayerNorm")
        for layer in range(cfg.n_layer):
            pre = f"encoder.layer.{layer}."
            q = lin(h, pre + "attention.self.query")
            k = lin(h, pre + "attention.self.key")
            v = lin(h, pre + "attention.self.value")
            a = np.zeros((T, C))
            for j in range(NH):
                sl = slice(j * HS, (j + 1) * HS)
                for i in range(T):
                    s = np.array([q[i, sl] @ k[t, sl] / math.sqrt(HS) for t in range(L)])
                    w = np.exp(s - s.max())
                    w /= w.sum()
                    a[i, sl] = sum(w[t] * v[t, sl] for t in range(L))
            h1 = ln(h + lin(a, pre + "attention.output.dense"), pre + "attention.output.LayerNorm")
            f = lin(g(lin(h1, pre + "intermediate.dense")), pre + "output.dense")
            h = ln(h1 + f, pre + "output.LayerNorm")
        if cfg.task == 0:
            for t in range(T):
                if targets[b, t] >= 0:
                    x = ln(g(lin(h[t], "cls.predictions.transform.dense")),
                           "cls.predictions.transform.LayerNorm")
                    z = x @ P["embeddings.word_embeddings.weight"].T + P["cls.predictions.bias"]
                    logits_all.append(z)
                    losses.append(np.log(np.exp(z - z.max()).sum()) + z.max() - z[targets[b, t]])
        else:
            z = lin(np.tanh(lin(h[0], "pooler.dense")), "classifier")
            logits_all.append(z)
            losses.append(np.log(np.exp(z - z.max()).sum()) + z.max() - z[targets[b]])
    return np.array(logits_all).reshape(B, -1, logits_all[0].shape[-1]), float(np.mean(losses))


def _tiny_batch(cfg: BertConfig, B: int, T: int, gen: torch.Generator):
    """A random batch for cfg.task: task 0 with masked targets, tasks 1, 2 with padding."""
    ids = torch.randint(0, cfg.vocab_size, (B, T), generator=gen)
    types = torch.zeros(B, T, dtype=torch.long)
    if cfg.task == 0:
        lengths = torch.full((B,), T)
        m = masked_count(T)
        targets = torch.full((B, T), -1)
        for b in range(B):
            pos = 1 + torch.randperm(T - 2, generator=gen)[:m]
            targets[b, pos] = torch.randint(0, cfg.vocab_size, (m,), generator=gen)
    else:
        lengths = torch.randint(3, T + 1, (B,), generator=gen)
        lengths[0] = T
        for b in range(B):
            cut = int(torch.randint(1, int(lengths[b]), (1,), generator=gen))
            types[b, cut:lengths[b]] = 1
            ids[b, lengths[b]:] = cfg.pad_id
        targets = torch.randint(0, CLASSES, (B,), generator=gen)
    return ids, types, lengths, targets


def self_test(verbose: bool = True) -> bool:
    """The reference checked without mpitron: (1) torch.autograd.gradcheck of the loss in float64
    for every parameter on a tiny model of each task; (2) padding: tokens and token types at
    padded positions change no valid position's output and no classification logit, while a
    valid token does; (3) a loop-by-loop numpy forward of the specification gives the same logits
    and loss; (4) one encoder layer equals torch.nn.TransformerEncoderLayer (post-LN, exact GELU,
    eps 1e-12, key padding mask) with the same weights; (5) the wrong variants differ."""
    ok = True

    def report(what: str, value: float, limit: float, above: bool = False) -> None:
        nonlocal ok
        good = value > limit if above else value < limit
        ok &= good
        if verbose:
            print(f"  self-test {what}: {value:.3e} ({'ok' if good else 'FAIL'}, "
                  f"{'>' if above else '<'} {limit:.0e})")

    gen = torch.Generator().manual_seed(7)
    for task in (0, 1, 2):
        # (1) gradcheck: analytic gradients of every parameter against finite differences
        cfg = BertConfig(n_layer=2, n_head=2, n_embd=4, block_size=8, vocab_size=8, task=task,
                         pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4)
        model = Bert(cfg).double()
        randomize(model, 11 + task)
        ids, types, lengths, targets = _tiny_batch(cfg, 3, 7, gen)
        names = [n for n, _ in model.named_parameters()]
        base = {n: p.detach().clone() for n, p in model.named_parameters()}

        def loss_of(*values):
            out = torch.nn.utils.stateless.functional_call(
                model, dict(zip(names, values)), (ids, types, lengths, targets))
            return out[1]

        inputs = tuple(base[n].clone().requires_grad_(True) for n in names)
        passed = torch.autograd.gradcheck(loss_of, inputs, eps=1e-6, atol=1e-8, rtol=1e-6,
                                          raise_exception=False)
        ok &= passed
        if verbose:
            print(f"  self-test task {task}: gradcheck of {sum(p.numel() for p in inputs)} "
                  f"parameters in float64: {'ok' if passed else 'FAIL'}")

        # (3) the numpy forward of the specification, on a slightly larger model
        cfg = BertConfig(n_layer=2, n_head=3, n_embd=12, block_size=12, vocab_size=11, task=task,
                         pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4)
        model = Bert(cfg).double()
        randomize(model, 21 + task)
        ids, types, lengths, targets = _tiny_batch(cfg, 4, 10, gen)
        with torch.no_grad():
            logits, loss = model(ids, types, lengths, targets)
        ref_logits, ref_loss = _numpy_forward(model, ids.numpy(), types.numpy(), lengths.numpy(),
                                              targets.numpy())
        err = max(float(np.max(np.abs(logits.numpy() - ref_logits)) / np.max(np.abs(ref_logits))),
                  abs(loss.item() - ref_loss) / abs(ref_loss))
        report(f"task {task}: torch against a loop-by-loop numpy forward (float64)", err, 1e-12)

        # (5) each wrong variant changes the result
        for what, opts in (("pre-LN", {"pre_ln": True}), ("tanh GELU", {"gelu": "tanh"}),
                           ("LayerNorm eps 1e-5", {"ln_eps": 1e-5}),
                           ("no padding mask", {"mask_padding": False}),
                           ("token types ignored", {"token_types": False})):
            if task == 0 and what in ("no padding mask", "token types ignored"):
                continue  # no padding and no type-1 tokens in task 0
            wrong = Bert(cfg, **opts).double()
            wrong.load_state_dict(model.state_dict())
            with torch.no_grad():
                w_logits, _ = wrong(ids, types, lengths, targets)
            d = float((w_logits - logits).abs().max() / logits.abs().max())
            report(f"task {task}: {what} changes the logits by", d, 1e-6, above=True)

    # (2) padding-mask invariance (task 2: two segments and padding)
    cfg = BertConfig(n_layer=2, n_head=4, n_embd=16, block_size=16, vocab_size=20, task=2,
                     pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4)
    model = Bert(cfg).double()
    randomize(model, 31)
    ids, types, lengths, targets = _tiny_batch(cfg, 6, 12, gen)
    lengths[1:] = torch.tensor([3, 5, 8, 11, 6])[:len(lengths) - 1]
    valid = torch.arange(12)[None, :] < lengths[:, None]
    with torch.no_grad():
        h = model.hidden(ids, types, lengths)
        logits, _ = model(ids, types, lengths, targets)
        ids2 = torch.where(valid, ids, torch.randint(0, cfg.vocab_size, ids.shape, generator=gen))
        types2 = torch.where(valid, types, 1 - types)
        h2 = model.hidden(ids2, types2, lengths)
        logits2, _ = model(ids2, types2, lengths, targets)
        d_valid = float((h - h2)[valid].abs().max())
        d_logits = float((logits - logits2).abs().max())
        ids3 = ids.clone()
        ids3[:, 1] = (ids3[:, 1] + 1) % cfg.vocab_size
        d_sensed = float((model.hidden(ids3, types, lengths) - h)[valid].abs().max())
        # queries at padded positions are computed normally: not zero, not NaN
        finite = bool(torch.isfinite(h).all()) and float(h[~valid].abs().max()) > 0
    report("padding: tokens and types at padded positions move valid outputs by", d_valid, 1e-13)
    report("padding: ... and the classification logits by", d_logits, 1e-13)
    report("padding: a valid token moves valid outputs by", d_sensed, 1e-3, above=True)
    if verbose:
        print(f"  self-test padded positions' outputs finite and computed: "
              f"{'ok' if finite else 'FAIL'}")
    ok &= finite

    # (4) one layer against torch's own post-LN encoder layer (training mode, dropout 0: not the
    # inference fast path, which zeroes padded positions)
    torch_layer = nn.TransformerEncoderLayer(cfg.n_embd, cfg.n_head, 4 * cfg.n_embd, dropout=0.0,
                                             activation="gelu", layer_norm_eps=LN_EPS,
                                             batch_first=True, norm_first=False).double()
    ours = model.encoder.layer[0]
    with torch.no_grad():
        sa = ours.attention.self
        torch_layer.self_attn.in_proj_weight.copy_(
            torch.cat([sa.query.weight, sa.key.weight, sa.value.weight]))
        torch_layer.self_attn.in_proj_bias.copy_(torch.cat([sa.query.bias, sa.key.bias,
                                                            sa.value.bias]))
        torch_layer.self_attn.out_proj.weight.copy_(ours.attention.output.dense.weight)
        torch_layer.self_attn.out_proj.bias.copy_(ours.attention.output.dense.bias)
        torch_layer.linear1.weight.copy_(ours.intermediate.dense.weight)
        torch_layer.linear1.bias.copy_(ours.intermediate.dense.bias)
        torch_layer.linear2.weight.copy_(ours.output.dense.weight)
        torch_layer.linear2.bias.copy_(ours.output.dense.bias)
        for mine, theirs in ((ours.attention.output.LayerNorm, torch_layer.norm1),
                             (ours.output.LayerNorm, torch_layer.norm2)):
            theirs.weight.copy_(mine.weight)
            theirs.bias.copy_(mine.bias)
        torch_layer.train()
        x = torch.randn(6, 12, cfg.n_embd, generator=gen, dtype=torch.float64)
        want = torch_layer(x, src_key_padding_mask=~valid)
        got = ours(x, valid)
    report("one layer against torch.nn.TransformerEncoderLayer (float64)",
           float((want - got).abs().max() / want.abs().max()), 1e-12)
    return ok


if __name__ == "__main__":
    import sys
    torch.set_num_threads(1)
    good = self_test()
    print(f"bert_torch self-test {'PASS' if good else 'FAIL'}")
    sys.exit(0 if good else 1)
