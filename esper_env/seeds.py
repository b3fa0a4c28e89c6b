"""Seeds: the torch building blocks the blueprints are made of, building a seed, and the learned blending gate.

Which blueprints exist, in which order and how each is assembled from these blocks is
:data:`esper_env.blueprints.BLUEPRINTS`; :func:`build_seed` builds one by its index. Every seed maps
``(B, C, H, W) -> (B, C, H, W)`` and equals the identity at initialisation (its last learnable layer is
zero-initialised), so planting a seed changes nothing until it learns. Normalisation is GroupNorm, never
BatchNorm, so a seed's output does not depend on the batch it sits in.

Where the last layer is a GroupNorm, its affine weight and bias start at zero: a zero *convolution* followed by
GroupNorm would normalise an all-zero tensor, whose gradient is scaled by 1/sqrt(eps) and explodes.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import nn

from esper_env.blueprints import BLUEPRINTS
from esper_env.config import EnvConfig


def group_count(channels: int) -> int:
    """GroupNorm groups with at least 4 channels each (one group for fewer than 8 channels)."""
    target = max(1, channels // 4)
    return max(d for d in range(1, target + 1) if channels % d == 0)


def group_norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(group_count(channels), channels)


def zero_group_norm(channels: int) -> nn.GroupNorm:
    """GroupNorm whose affine weight and bias start at 0: its output is exactly 0 until it learns."""
    norm = group_norm(channels)
    nn.init.zeros_(norm.weight)
    nn.init.zeros_(norm.bias)
    return norm


def conv(c_in: int, c_out: int, kernel: int, groups: int = 1) -> nn.Conv2d:
    """A bias-free convolution that keeps the spatial size."""
    return nn.Conv2d(c_in, c_out, kernel, padding=kernel // 2, groups=groups, bias=False)


def zero_conv(c_in: int, c_out: int, kernel: int) -> nn.Conv2d:
    """:func:`conv` with its weight zeroed after the default draw (the draw still advances the generator)."""
    layer = conv(c_in, c_out, kernel)
    nn.init.zeros_(layer.weight)
    return layer


def relu() -> nn.ReLU:
    return nn.ReLU()


class Residual(nn.Module):
    """``x + body(x)`` with ``body`` the given layers in sequence."""

    def __init__(self, *layers: nn.Module) -> None:
        super().__init__()
        self.body = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class NormSeed(nn.Module):
    """``x + tanh(s) * (GN(x) - x)`` with the scalar ``s`` starting at 0."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(group_count(channels), channels)
        self.strength = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.strength) * (self.norm(x) - x)


class AttentionSeed(nn.Module):
    """Squeeze-excitation gate ``x * (1 + tanh(g(x)))``; ``g``'s last layer starts at zero."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        hidden = max(4, channels // 4)
        self.squeeze = nn.Linear(channels, hidden)
        self.excite = nn.Linear(hidden, channels)
        nn.init.zeros_(self.excite.weight)
        nn.init.zeros_(self.excite.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = x.mean(dim=(2, 3))
        gate = torch.tanh(self.excite(torch.relu(self.squeeze(pooled))))
        return x * (1 + gate[:, :, None, None])


class BlendGate(nn.Module):
    """A per-sample gate in (0, 1) from pooled features, starting at 0.5 (last layer zero-initialised)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        hidden = max(4, channels // 4)
        self.hidden = nn.Linear(channels, hidden)
        self.out = nn.Linear(hidden, 1)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.out(torch.relu(self.hidden(x.mean(dim=(2, 3))))))[:, :, None, None]


def build_seed(blueprint: int, channels: int) -> nn.Module:
    """A fresh seed module of blueprint index ``blueprint`` for a slot with ``channels`` channels."""
    if not 0 <= blueprint < len(BLUEPRINTS):
        raise ValueError(f"blueprint={blueprint!r}; expected an index in [0, {len(BLUEPRINTS)})")
    return BLUEPRINTS[blueprint].build(channels)


@functools.cache
def seed_param_count(blueprint: int, channels: int, gated: bool = False) -> int:
    """Parameters of a seed (plus its blending gate when ``gated``), counted without allocating memory."""
    with torch.device("meta"):
        modules = [build_seed(blueprint, channels)] + ([BlendGate(channels)] if gated else [])
    return sum(p.numel() for m in modules for p in m.parameters())


def param_table(cfg: EnvConfig) -> np.ndarray:
    """``[slot, blueprint, gated]``: the parameters of each blueprint planted in each slot of the small host, without
    and with its blending gate (what the masks' budget and the seed-parameter cost read)."""
    channels = [cfg.host_widths[b] for b in cfg.slot_block_indices]
    table = np.zeros((cfg.num_slots, len(BLUEPRINTS), 2))
    for s, c in enumerate(channels):
        for b in range(len(BLUEPRINTS)):
            table[s, b] = [seed_param_count(b, c, False), seed_param_count(b, c, True)]
    return table
