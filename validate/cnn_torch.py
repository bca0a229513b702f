"""Independent plain-PyTorch CNNs (mpitron's "alexnet" and "resnet" families) that read mpitron
checkpoints.

The reference validate/cnn_oracle_test.py compares mpitron's convolutional families against: the
same networks (src/model/cnn.cpp) written with ordinary torch modules (nn.Conv2d, F.batch_norm,
F.max_pool2d, nn.Linear) and autograd, so that they share no code with the hand-written C++
forward and backward passes.
  alexnet: [conv3x3 - BN - ReLU - maxpool2] x2, conv3x3 - BN - ReLU, conv3x3 - BN - ReLU -
           maxpool2 (widths W, 2W, 4W, 4W), flatten, fc1 - ReLU - fc2 (dropout before fc1 is
           not modelled: the oracle runs with dropout 0).
  resnet:  stem conv3x3 - BN - ReLU, three stages of blocks_per_stage basic blocks (widths W, 2W,
           4W; stride 2 entering stages 2 and 3; a 1x1 conv + BN shortcut where the shape
           changes), global average pooling, fc.
Batch norm in training mode is "ghost" batch norm (Hoffer et al. 2017): the batch is cut into
consecutive groups of model.norm_group samples, each normalised with its own per-channel mean
and biased variance. The running statistics move once per optimizer step (`end_step`), by
momentum 0.1 towards the average over the step's groups of each group's mean and unbiased
variance; evaluation mode normalises with them. Names are exactly the checkpoint's
(/params/<name>, /buffers/<name>: torchvision's naming). The optimizer is torch.optim.AdamW with
mpitron's decay groups (conv and linear weights decay; batch-norm parameters and biases do not),
its learning-rate schedule and clipping (gpt_torch.learning_rate, clip_grad_global_norm).
Usage: model = cnn_torch.load_model("ckpt_0.h5", torch.float64); loss_and_grads(model, images,
labels) with images (B, pixels) bytes 0-255.
"""

from __future__ import annotations

from dataclasses import dataclass

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from gpt_torch import TrainConfig, clip_grad_global_norm, learning_rate

BN_EPS = 1e-5
BN_MOMENTUM = 0.1


class Kinks:
    """Round-off at the network's non-differentiable points. A ReLU input within round-off of 0,
    or a 2x2 max-pool window whose two largest inputs are within round-off of each other, may be
    decided the other way by a float32 implementation: that moves one gradient element by a whole
    upstream gradient value, far above round-off. With tol, every ReLU input with
    0 < |x| <= tol * max|x| and every pool window with 0 < top1 - top2 <= tol * max|x| (exact ties
    go to the first in both) is recorded in `ambiguous` as (site, element), sites numbered in
    forward order; `flip` lists such kinks to decide the other way (the ReLU passes or blocks the
    gradient there, the pool routes it to the runner-up)."""

    def __init__(self, tol: float = 0.0, flip=()):
        self.tol = tol
        self.flip = set(flip)
        self.ambiguous: list[tuple[int, int]] = []
        self.margin: dict[tuple[int, int], float] = {}  # |x| or the gap, over max|x|
        self.site = 0

    def _note(self, values: torch.Tensor, scale: torch.Tensor) -> None:
        near = torch.nonzero((values > 0) & (values <= self.tol * scale)).reshape(-1)
        for i in near:
            self.ambiguous.append((self.site, int(i)))
            self.margin[(self.site, int(i))] = float(values[i] / scale)

    def _flips(self) -> list[int]:
        return [i for s, i in self.flip if s == self.site]


_kinks: Kinks | None = None


def relu(x: torch.Tensor) -> torch.Tensor:
    k = _kinks
    if k is None:
        return F.relu(x)
    flat = x.detach().reshape(-1)
    if k.tol > 0:
        k._note(flat.abs(), flat.abs().max())
    flips = k._flips()
    k.site += 1
    if not flips:
        return F.relu(x)
    mask = flat > 0
    for i in flips:
        mask[i] = ~mask[i]
    return x * mask.reshape(x.shape).to(x.dtype)


def max_pool2(x: torch.Tensor) -> torch.Tensor:
    """2x2 max pooling, stride 2 (odd edges dropped)."""
    k = _kinks
    if k is None:
        return F.max_pool2d(x, 2, 2)
    out, idx = F.max_pool2d(x, 2, 2, return_indices=True)
    B, C, H, W = x.shape
    oh, ow = out.shape[2:]
    win = x.detach()[:, :, :2 * oh, :2 * ow].reshape(B, C, oh, 2, ow, 2).permute(0, 1, 2, 4, 3, 5)
    win = win.reshape(B, C, oh, ow, 4)
    top = torch.topk(win, 2, dim=-1)
    if k.tol > 0:
        k._note((top.values[..., 0] - top.values[..., 1]).reshape(-1), x.detach().abs().max())
    flips = k._flips()
    k.site += 1
    if not flips:
        return out
    idx = idx.clone().reshape(-1)
    second = top.indices[..., 1].reshape(-1)
    for i in flips:  # window i = ((b*C + c)*oh + y)*ow + x; position 2y+dy, 2x+dx
        y, xw = (i // ow) % oh, i % ow
        dy, dx = divmod(int(second[i]), 2)
        idx[i] = (2 * y + dy) * W + 2 * xw + dx
    return x.reshape(B, C, H * W).gather(2, idx.reshape(B, C, oh * ow)).reshape(out.shape)


@dataclass
class CnnConfig:
    type: str = "resnet"
    channels: int = 1
    image: int = 28
    classes: int = 10
    width: int = 16
    hidden: int = 0            # alexnet
    blocks_per_stage: int = 0  # resnet
    norm_group: int = 8


class GhostBatchNorm2d(nn.Module):
    """BatchNorm2d whose training-mode statistics are those of consecutive groups of `group`
    samples; running statistics updated by end_step() from the groups seen since the last."""

    def __init__(self, channels: int, group: int):
        super().__init__()
        self.group = group
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))
        self.reset_statistics()

    def reset_statistics(self) -> None:
        self.mean_sum, self.var_sum, self.groups = 0.0, 0.0, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                training=False, eps=BN_EPS)
        if x.shape[0] % self.group:
            raise ValueError(f"batch of {x.shape[0]} is not a whole number of groups of "
                             f"{self.group}")
        outs = []
        for chunk in x.split(self.group, dim=0):
            outs.append(F.batch_norm(chunk, None, None, self.weight, self.bias, training=True,
                                     eps=BN_EPS))
            with torch.no_grad():
                self.mean_sum = self.mean_sum + chunk.mean(dim=(0, 2, 3)).double()
                self.var_sum = self.var_sum + chunk.var(dim=(0, 2, 3), unbiased=True).double()
                self.groups += 1
        return torch.cat(outs, dim=0)

    @torch.no_grad()
    def end_step(self) -> None:
        if self.groups:
            m = BN_MOMENTUM
            mean, var = self.mean_sum / self.groups, self.var_sum / self.groups
            self.running_mean.copy_((1 - m) * self.running_mean.double() + m * mean)
            self.running_var.copy_((1 - m) * self.running_var.double() + m * var)
        self.reset_statistics()


def conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


class AlexNet(nn.Module):
    def __init__(self, cfg: CnnConfig):
        super().__init__()
        W, G = cfg.width, cfg.norm_group
        self.conv1, self.bn1 = conv3x3(cfg.channels, W), GhostBatchNorm2d(W, G)
        self.conv2, self.bn2 = conv3x3(W, 2 * W), GhostBatchNorm2d(2 * W, G)
        self.conv3, self.bn3 = conv3x3(2 * W, 4 * W), GhostBatchNorm2d(4 * W, G)
        self.conv4, self.bn4 = conv3x3(4 * W, 4 * W), GhostBatchNorm2d(4 * W, G)
        side = cfg.image // 2 // 2 // 2
        self.fc1 = nn.Linear(4 * W * side * side, cfg.hidden)
        self.fc2 = nn.Linear(cfg.hidden, cfg.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = max_pool2(relu(self.bn1(self.conv1(x))))
        x = max_pool2(relu(self.bn2(self.conv2(x))))
        x = relu(self.bn3(self.conv3(x)))
        x = max_pool2(relu(self.bn4(self.conv4(x))))
        return self.fc2(relu(self.fc1(torch.flatten(x, 1))))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, group: int):
        super().__init__()
        self.conv1, self.bn1 = conv3x3(cin, cout, stride), GhostBatchNorm2d(cout, group)
        self.conv2, self.bn2 = conv3x3(cout, cout), GhostBatchNorm2d(cout, group)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                            GhostBatchNorm2d(cout, group))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(relu(self.bn1(self.conv1(x)))))
        return relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    def __init__(self, cfg: CnnConfig):
        super().__init__()
        W, G, n = cfg.width, cfg.norm_group, cfg.blocks_per_stage
        self.conv1, self.bn1 = conv3x3(cfg.channels, W), GhostBatchNorm2d(W, G)
        cin = W
        for stage in range(3):
            cout = W << stage
            blocks = []
            for i in range(n):
                blocks.append(BasicBlock(cin, cout, 2 if stage > 0 and i == 0 else 1, G))
                cin = cout
            setattr(self, f"layer{stage + 1}", nn.Sequential(*blocks))
        self.fc = nn.Linear(cin, cfg.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(x.mean(dim=(2, 3)))


def build(cfg: CnnConfig) -> nn.Module:
    if cfg.type == "alexnet":
        return AlexNet(cfg)
    if cfg.type == "resnet":
        return ResNet(cfg)
    raise ValueError(f"model.type {cfg.type!r} is not a CNN family")


def batch_norms(model: nn.Module) -> list[GhostBatchNorm2d]:
    return [m for m in model.modules() if isinstance(m, GhostBatchNorm2d)]


def end_step(model: nn.Module) -> None:
    """Moves every batch norm's running statistics (once per optimizer step)."""
    for bn in batch_norms(model):
        bn.end_step()


def reset_statistics(model: nn.Module) -> None:
    """Forgets the group statistics gathered since the last end_step (a forward not trained on)."""
    for bn in batch_norms(model):
        bn.reset_statistics()


def read_checkpoint(path: str) -> tuple[CnnConfig, dict, dict, dict]:
    """(config, params, buffers, root attributes) of an mpitron checkpoint."""
    with h5py.File(path, "r") as f:
        attrs = {k: (v.item() if hasattr(v, "item") else v) for k, v in f.attrs.items()}
        kind = attrs["model.type"]
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        cfg = CnnConfig(type=kind)
        for k in CnnConfig.__dataclass_fields__:
            if k != "type" and f"model.{k}" in attrs:
                setattr(cfg, k, int(attrs[f"model.{k}"]))
        tensors = {}
        for group in ("params", "buffers"):
            tensors[group] = {}
            if group in f:
                f[group].visititems(lambda n, o, d=tensors[group]: d.__setitem__(n, o[()])
                                    if isinstance(o, h5py.Dataset) else None)
    return cfg, tensors["params"], tensors["buffers"], attrs


def load_model(path: str, dtype: torch.dtype = torch.float32,
               norm_group: int | None = None) -> nn.Module:
    """The model of an mpitron checkpoint, every parameter and running statistic loaded (names and
    shapes checked). norm_group overrides the checkpoint's (only to build a wrong model)."""
    cfg, params, buffers, _ = read_checkpoint(path)
    if norm_group is not None:
        cfg.norm_group = norm_group
    model = build(cfg).to(dtype)
    for kind, own, theirs in (("parameters", dict(model.named_parameters()), params),
                              ("buffers", dict(model.named_buffers()), buffers)):
        missing = sorted(set(own) - set(theirs))
        extra = sorted(set(theirs) - set(own))
        if missing or extra:
            raise ValueError(f"{path}: {kind} missing {missing[:5]}, unexpected {extra[:5]}")
        with torch.no_grad():
            for name, t in own.items():
                a = theirs[name]
                if tuple(a.shape) != tuple(t.shape):
                    raise ValueError(f"{path}: {name} has shape {a.shape}, expected "
                                     f"{tuple(t.shape)}")
                t.copy_(torch.from_numpy(np.asarray(a)).to(dtype))
    model.cfg = cfg
    return model


def images_tensor(model: nn.Module, images) -> torch.Tensor:
    """(B, pixels) bytes -> (B, C, H, W) as mpitron reads them: float32 byte / 255, then the model's
    dtype (so a float64 run sees the very same inputs)."""
    cfg = model.cfg
    x = torch.as_tensor(np.asarray(images), dtype=torch.float32) / 255.0
    dtype = next(model.parameters()).dtype
    return x.to(dtype).reshape(-1, cfg.channels, cfg.image, cfg.image)


def logits_and_loss(model: nn.Module, images, labels) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (B, classes) and mean cross-entropy, in the model's current mode."""
    logits = model(images_tensor(model, images))
    loss = F.cross_entropy(logits, torch.as_tensor(np.asarray(labels), dtype=torch.long))
    return logits, loss


def loss_and_grads(model: nn.Module, images, labels, kinks: Kinks | None = None
                   ) -> tuple[float, np.ndarray, dict[str, np.ndarray]]:
    """Loss, logits (B, 1, classes) and every parameter's gradient of the mean loss, in training
    mode (ghost-group batch norm); running statistics untouched, model left zero-grad. kinks:
    record ambiguous kinks and decide some the other way (Kinks)."""
    global _kinks
    model.train()
    model.zero_grad(set_to_none=True)
    _kinks = kinks
    try:
        logits, loss = logits_and_loss(model, images, labels)
    finally:
        _kinks = None
    loss.backward()
    grads = {n: p.grad.detach().numpy().copy() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    reset_statistics(model)
    return loss.item(), logits.detach().numpy()[:, None, :], grads


def decayed(name: str, p: torch.Tensor) -> bool:
    """mpitron's rule for the CNNs (cnn_registry): conv and linear weights decay, batch-norm
    weights and biases do not."""
    return p.dim() >= 2


def make_optimizer(model: nn.Module, tc: TrainConfig) -> torch.optim.AdamW:
    named = list(model.named_parameters())
    groups = [
        {"params": [p for n, p in named if decayed(n, p)], "weight_decay": tc.weight_decay},
        {"params": [p for n, p in named if not decayed(n, p)], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=tc.lr, betas=(tc.beta1, tc.beta2), eps=tc.eps)


def train_config(attrs: dict) -> TrainConfig:
    """The optimizer settings an mpitron checkpoint records (train.*)."""
    return TrainConfig(lr=float(attrs["train.lr"]), min_lr_ratio=float(attrs["train.min_lr_ratio"]),
                       warmup_steps=int(attrs["train.warmup_steps"]),
                       steps=int(attrs["train.steps"]),
                       weight_decay=float(attrs["train.weight_decay"]),
                       beta1=float(attrs["train.beta1"]), beta2=float(attrs["train.beta2"]),
                       eps=float(attrs["train.eps"]), grad_clip=float(attrs["train.grad_clip"]))


def train_step(model: nn.Module, opt: torch.optim.Optimizer, images, labels, step: int,
               tc: TrainConfig, kinks: Kinks | None = None) -> dict:
    """One optimizer step (1-based `step`, dropout 0, no augmentation); running statistics move
    once. kinks: decide some kinks the other way (Kinks). Returns loss, grad_norm and lr."""
    global _kinks
    lr = learning_rate(step, tc.lr, tc.warmup_steps, tc.steps, tc.min_lr_ratio)
    for g in opt.param_groups:
        g["lr"] = lr
    model.train()
    opt.zero_grad(set_to_none=True)
    _kinks = kinks
    try:
        _, loss = logits_and_loss(model, images, labels)
    finally:
        _kinks = None
    loss.backward()
    end_step(model)
    norm = clip_grad_global_norm(model, tc.grad_clip)
    opt.step()
    return {"loss": loss.item(), "grad_norm": norm, "lr": lr}


@torch.no_grad()
def eval_loss(model: nn.Module, images, labels) -> float:
    """Mean cross-entropy in evaluation mode (running statistics)."""
    model.eval()
    return logits_and_loss(model, images, labels)[1].item()
