"""Members of the growable host family, as plain data: architectures and their analytic counts. No torch.

An :class:`Architecture` names a member of the family (``esper_env.family`` builds it); :func:`param_count` and
:func:`forward_flops` count it without building it, so the config, the costs and the masks can reason about
growth without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Architecture:
    """A member of the family: stem width, and per stage its width and its number of residual blocks."""

    widths: tuple[int, ...] = (16, 32, 32)
    """Output channels of each stage (count)."""
    blocks: tuple[int, ...] = (0, 0, 0)
    """Residual blocks after each stage's pooled conv (count)."""
    stem: int = 24
    """Output channels of the full-resolution stem conv (count); fixed for the whole episode."""

    def __post_init__(self) -> None:
        if len(self.widths) < 1 or any(w < 1 for w in self.widths):
            raise ValueError(f"widths={self.widths!r}; expected a non-empty tuple of positive channel counts")
        if len(self.blocks) != len(self.widths) or any(b < 0 for b in self.blocks):
            raise ValueError(f"blocks={self.blocks!r}; expected {len(self.widths)} block counts >= 0, one per stage")
        if self.stem < 1:
            raise ValueError(f"stem={self.stem!r}; expected a positive channel count")

    def widened(self, stage: int, width: int) -> Architecture:
        widths = list(self.widths)
        widths[stage] = width
        return replace(self, widths=tuple(widths))

    def deepened(self, stage: int) -> Architecture:
        blocks = list(self.blocks)
        blocks[stage] += 1
        return replace(self, blocks=tuple(blocks))



def param_count(arch: Architecture, num_classes: int = 10, in_channels: int = 3) -> int:
    """Trainable parameters of ``arch`` (conv weights, BatchNorm affines, the head)."""
    total = 9 * in_channels * arch.stem + 2 * arch.stem
    c_in = arch.stem
    for width, blocks in zip(arch.widths, arch.blocks, strict=True):
        total += 9 * c_in * width + 2 * width + blocks * (2 * 9 * width * width + 4 * width)
        c_in = width
    return total + c_in * num_classes


def forward_flops(arch: Architecture, image_size: int = 32, num_classes: int = 10, in_channels: int = 3) -> int:
    """Multiply-adds times two of one image's forward pass through the convolutions and the head.

    Normalisation, activations and pooling are left out: they are a few percent of a conv net's arithmetic.
    A training step costs about three forward passes (forward, and the two products of the backward).
    """
    pixels = image_size * image_size
    flops = 2 * 9 * in_channels * arch.stem * pixels
    c_in = arch.stem
    for width, blocks in zip(arch.widths, arch.blocks, strict=True):
        flops += 2 * 9 * c_in * width * pixels  # the stage's conv runs before its pool
        pixels //= 4
        flops += blocks * 2 * (2 * 9 * width * width * pixels)
        c_in = width
    return flops + 2 * c_in * num_classes


WIDEN_FACTORS = {"widen_s": 1.0, "widen_l": 3.0}
"""The width blueprints (``blueprints.FAMILY_BLUEPRINTS``): the channels they add, as a multiple of the stage's
current width (twice and four times as wide). Large steps, because one growth takes several epochs of the
lifecycle (incubation, blending, holding) and the family spans 16 to 256 channels a stage: with these, the
seedling reaches 64/128/128 in one round of three seeds."""


def widen_extra(width: int, name: str) -> int:
    """Channels the widen blueprint ``name`` adds to a stage of ``width`` channels (at least one)."""
    return max(1, round(width * WIDEN_FACTORS[name]))
