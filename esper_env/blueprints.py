"""The blueprint catalogue: each seed kind's name, what it computes and how to build it, in action order.

:data:`BLUEPRINTS` is the one source of truth. ``spaces`` takes the blueprint head's size and the observation's
one-hot from it, ``seeds.build_seed`` builds from it, and the env's docstring lists it. A blueprint's index is
the action value that trained agents and committed results recorded: append a new blueprint, never insert or
reorder. Every blueprint must equal the identity when built (its last learnable layer starts at zero), so that
planting it changes nothing until it learns; ``tests/esper_env/test_host.py`` checks that of every entry.

Pure Python: the factories reach the torch building blocks in ``esper_env.seeds`` only when called, so that the
spaces and the pure rules that read blueprint names never import torch.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from torch import nn


class Blueprint(NamedTuple):
    name: str
    """The blueprint's name in docs, logs and reports (a Python identifier)."""
    doc: str
    """What the seed computes, with ``x`` its input and ``C`` the slot's channels (one line)."""
    build: Callable[[int], nn.Module]
    """channels -> a fresh seed ``(B, C, H, W) -> (B, C, H, W)`` that starts as the identity."""


def _blocks() -> ModuleType:
    from esper_env import seeds  # torch lives there; imported on the first build, not with the catalogue

    return seeds


def _norm(c: int) -> nn.Module:
    return _blocks().NormSeed(c)


def _attention(c: int) -> nn.Module:
    return _blocks().AttentionSeed(c)


def _depthwise(c: int) -> nn.Module:
    b = _blocks()
    return b.Residual(b.conv(c, c, 3, groups=c), b.conv(c, c, 1), b.zero_group_norm(c))


def _conv_small(c: int) -> nn.Module:
    b = _blocks()
    return b.Residual(b.conv(c, c, 1), b.zero_group_norm(c))


def _bottleneck(c: int) -> nn.Module:
    b = _blocks()
    width = max(8, c // 4)
    up = b.zero_conv(width, c, 1)  # made first: the order the weights are drawn in is part of a seeded run
    return b.Residual(b.conv(c, width, 1), b.relu(), b.conv(width, width, 3), b.relu(), up)


def _conv_light(c: int) -> nn.Module:
    b = _blocks()
    return b.Residual(b.conv(c, c, 3), b.zero_group_norm(c))


def _conv_heavy(c: int) -> nn.Module:
    b = _blocks()
    # No ReLU after the last, zero-initialised GroupNorm: ReLU's gradient at exactly 0 is 0, the seed would
    # never start learning.
    return b.Residual(b.conv(c, c, 3), b.group_norm(c), b.relu(), b.conv(c, c, 3), b.zero_group_norm(c))


BLUEPRINTS: tuple[Blueprint, ...] = (
    Blueprint("norm", "x + tanh(s)·(GN(x) − x), the scalar s starting at 0", _norm),
    Blueprint("attention", "squeeze-excitation gate x·(1 + tanh(g(x))), g's last layer zero", _attention),
    Blueprint("depthwise", "x + GN(conv1x1(depthwise conv3x3(x))), GN affine zero", _depthwise),
    Blueprint("conv_small", "x + GN(conv1x1(x)), GN affine zero", _conv_small),
    Blueprint("bottleneck", "x + up1x1(ReLU(conv3x3(ReLU(down1x1(x))))), width max(8, C/4), up zero",
              _bottleneck),
    Blueprint("conv_light", "x + GN(conv3x3(x)), GN affine zero", _conv_light),
    Blueprint("conv_heavy", "x + GN(conv3x3(ReLU(GN(conv3x3(x))))), the last GN affine zero", _conv_heavy),
)
"""Every blueprint of the small host, in action-head order (the index is the blueprint head's value)."""


def _family_only(c: int) -> nn.Module:
    raise ValueError("the family blueprints grow a family host in place (esper_env.family_host); they have no "
                     "stand-alone seed")


FAMILY_BLUEPRINTS: tuple[Blueprint, ...] = (
    Blueprint("deepen", "a residual block x + BN0(conv3x3(GELU(BN(conv3x3(x))))) after the stage, BN0 zero",
              _family_only),
    Blueprint("widen_s", "the stage gains C channels split from its own (Net2Net; see family_host)",
              _family_only),
    Blueprint("widen_l", "the stage gains 3C channels split from its own (Net2Net; see family_host)",
              _family_only),
)
"""What the blueprint head's values mean on the growable family host (``EnvConfig.host == "family"``), in
action-head order; values past the end are masked off there. The head keeps the small host's size, so that the
small task's spaces, and every result recorded on it, stay as they were."""

assert len(FAMILY_BLUEPRINTS) <= len(BLUEPRINTS)


def catalogue(host: str) -> tuple[Blueprint, ...]:
    """The blueprints a host of kind ``host`` (``"small"`` or ``"family"``) can plant, in head order."""
    return FAMILY_BLUEPRINTS if host == "family" else BLUEPRINTS


__all__ = ["BLUEPRINTS", "FAMILY_BLUEPRINTS", "Blueprint", "catalogue"]
