"""Seed blueprints: small residual modules that start as the identity, and the learned blending gate.

Every blueprint maps ``(B, C, H, W) -> (B, C, H, W)`` and equals the identity at initialisation (its last
learnable layer is zero-initialised), so planting a seed changes nothing until it learns. Normalisation is
GroupNorm, never BatchNorm, so a seed's output does not depend on the batch it sits in.

Where the last layer is a GroupNorm, its affine weight and bias start at zero: a zero *convolution* followed by
GroupNorm would normalise an all-zero tensor, whose gradient is scaled by 1/sqrt(eps) and explodes.
For the same reason ``conv_heavy``'s last block has no ReLU after its zero GroupNorm: ReLU's gradient at
exactly 0 is 0 in PyTorch, so the seed could never start learning.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import nn

from esper_env.spaces import BLUEPRINT_NAMES


def group_count(channels: int) -> int:
    """GroupNorm groups with at least 4 channels each (one group for fewer than 8 channels)."""
    target = max(1, channels // 4)
    return max(d for d in range(1, target + 1) if channels % d == 0)


def _zero_group_norm(channels: int) -> nn.GroupNorm:
    norm = nn.GroupNorm(group_count(channels), channels)
    nn.init.zeros_(norm.weight)
    nn.init.zeros_(norm.bias)
    return norm


class Residual(nn.Module):
    """``x + body(x)``."""

    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body

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


def _conv(c_in: int, c_out: int, kernel: int, groups: int = 1) -> nn.Conv2d:
    return nn.Conv2d(c_in, c_out, kernel, padding=kernel // 2, groups=groups, bias=False)


def _depthwise(c: int) -> nn.Module:
    return Residual(nn.Sequential(_conv(c, c, 3, groups=c), _conv(c, c, 1), _zero_group_norm(c)))


def _conv_small(c: int) -> nn.Module:
    return Residual(nn.Sequential(_conv(c, c, 1), _zero_group_norm(c)))


def _bottleneck(c: int) -> nn.Module:
    width = max(8, c // 4)
    up = _conv(width, c, 1)
    nn.init.zeros_(up.weight)
    return Residual(nn.Sequential(_conv(c, width, 1), nn.ReLU(), _conv(width, width, 3), nn.ReLU(), up))


def _conv_light(c: int) -> nn.Module:
    return Residual(nn.Sequential(_conv(c, c, 3), _zero_group_norm(c)))


def _conv_heavy(c: int) -> nn.Module:
    first = [_conv(c, c, 3), nn.GroupNorm(group_count(c), c), nn.ReLU()]
    return Residual(nn.Sequential(*first, _conv(c, c, 3), _zero_group_norm(c)))


BLUEPRINTS: dict[str, Callable[[int], nn.Module]] = {
    "norm": NormSeed,
    "attention": AttentionSeed,
    "depthwise": _depthwise,
    "conv_small": _conv_small,
    "bottleneck": _bottleneck,
    "conv_light": _conv_light,
    "conv_heavy": _conv_heavy,
}
"""name -> factory(channels); in the action head's order (``spaces.BLUEPRINT_NAMES``, checked by a test)."""


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
    return BLUEPRINTS[BLUEPRINT_NAMES[blueprint]](channels)


@functools.cache
def seed_param_count(blueprint: int, channels: int, gated: bool = False) -> int:
    """Parameters of a seed (plus its blending gate when ``gated``), counted without allocating memory."""
    with torch.device("meta"):
        modules = [build_seed(blueprint, channels)] + ([BlendGate(channels)] if gated else [])
    return sum(p.numel() for m in modules for p in m.parameters())
