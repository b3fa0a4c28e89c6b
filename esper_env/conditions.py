"""Hidden training conditions: how much data an episode's host really has, how clean, and how hard the task is.

Growth pays only when the right size is not known in advance, so each episode of the task's version 2 draws a
condition that changes how much capacity is worth, and the observation never shows it: a controller must
infer it from the training curves. The axes:

* **pool**: the number of distinct training images the episode draws from. Every epoch still trains on the
  same number of images (``images_per_epoch``), drawn from the pool in passes without replacement, so the
  step's cost and the FLOPs counter are the same under every condition and give nothing away;
* **label noise**: the fraction of the pool whose label is replaced, once per episode, by a uniformly drawn
  *other* class (so exactly that fraction is wrong). Validation and test labels stay clean;
* **classes in play**: the episode trains on, and is scored on, the images of only this many classes, drawn
  once per episode (the classifier keeps every output): fewer classes make the task easier, so capacity is
  worth less;
* **resolution**: images reduced to this side length by average pooling and enlarged back, at training and
  scoring alike: less information per image at the same input size and cost.

The pool and noise axes are in the catalogue below; classes and resolution are being screened
(``benchmarks/grow_cost.py``) before any condition of the catalogue uses them.

A :class:`Condition` is pure data; :func:`draw_classes`, :func:`draw_pool`, :func:`noisy_labels`,
:func:`epoch_order` and :func:`reduce_resolution` apply it
to device tensors with the episode's generator, so an episode is reproducible from its reset seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Condition:
    """One training condition of the hidden mixture."""

    name: str
    pool: int | None = None
    """Distinct training images the episode draws from (count); None = the whole training split."""
    label_noise: float = 0.0
    """Fraction of the pool's labels replaced by another class, in [0, 1)."""
    classes: int | None = None
    """Classes in play (count, at least 2); None = every class."""
    resolution: int | None = None
    """Side length the images are reduced to (pixels; must divide the image size); None = full resolution."""

    def __post_init__(self) -> None:
        if self.pool is not None and self.pool < 1:
            raise ValueError(f"pool={self.pool!r} for condition {self.name!r}; expected None or an integer >= 1")
        if not 0.0 <= self.label_noise < 1.0:
            raise ValueError(f"label_noise={self.label_noise!r} for condition {self.name!r}; expected [0, 1)")
        if self.classes is not None and self.classes < 2:
            raise ValueError(f"classes={self.classes!r} for condition {self.name!r}; expected None or an integer >= 2")
        if self.resolution is not None and self.resolution < 1:
            raise ValueError(f"resolution={self.resolution!r} for condition {self.name!r}; expected None or >= 1")


CONDITIONS = (
    Condition("full"),
    Condition("pool15k", pool=15_000),
    Condition("pool5k", pool=5_000),
    Condition("noise40", label_noise=0.4),
    Condition("pool15k-noise20", pool=15_000, label_noise=0.2),
)
"""The documented set; names are what a ``condition`` kwarg takes."""

BY_NAME = {c.name: c for c in CONDITIONS}


def condition_named(name: str) -> Condition:
    """The condition called ``name``, or a ValueError listing the known ones."""
    if name not in BY_NAME:
        raise ValueError(f"condition={name!r} is unknown; expected one of {sorted(BY_NAME)}")
    return BY_NAME[name]


def draw_classes(condition: Condition, num_classes: int, generator: torch.Generator) -> torch.Tensor | None:
    """The episode's classes in play (int64, sorted), or None when every class is."""
    if condition.classes is None:
        return None
    if condition.classes > num_classes:
        raise ValueError(f"condition {condition.name!r} puts {condition.classes} classes in play; the data has "
                         f"{num_classes}")
    chosen = torch.randperm(num_classes, generator=generator, device=generator.device)[: condition.classes]
    return chosen.sort().values


def in_play(labels: torch.Tensor, classes: torch.Tensor | None) -> torch.Tensor:
    """Indices of the images whose label is one of ``classes`` (every index when ``classes`` is None)."""
    if classes is None:
        return torch.arange(len(labels), device=labels.device)
    return torch.isin(labels, classes).nonzero().flatten()


def draw_pool(condition: Condition, candidates: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The episode's pool: ``condition.pool`` of the ``candidates`` (indices into the training split), drawn
    without replacement, or all of them in a random order when the condition sets no pool size."""
    size = len(candidates) if condition.pool is None else condition.pool
    if size > len(candidates):
        raise ValueError(f"condition {condition.name!r} needs a pool of {size} images; it has {len(candidates)}")
    return candidates[torch.randperm(len(candidates), generator=generator, device=generator.device)[:size]]


def reduce_resolution(images: torch.Tensor, condition: Condition) -> torch.Tensor:
    """Float images ``(B, C, H, W)`` averaged down to the condition's resolution and enlarged back (nearest)."""
    if condition.resolution is None:
        return images
    size = images.shape[-1]
    if size % condition.resolution:
        raise ValueError(f"condition {condition.name!r}: resolution={condition.resolution} does not divide the "
                         f"image size {size}")
    factor = size // condition.resolution
    return F.avg_pool2d(images, factor).repeat_interleave(factor, -2).repeat_interleave(factor, -1)


def noisy_labels(labels: torch.Tensor, condition: Condition, num_classes: int,
                 generator: torch.Generator) -> torch.Tensor:
    """A copy of ``labels`` (the pool's) with ``round(label_noise * n)`` of them moved to another class."""
    out = labels.clone()
    wrong = round(condition.label_noise * len(labels))
    if wrong == 0:
        return out
    device = generator.device
    chosen = torch.randperm(len(labels), generator=generator, device=device)[:wrong]
    shift = torch.randint(1, num_classes, (wrong,), generator=generator, device=device)  # never 0: always wrong
    out[chosen] = (labels[chosen] + shift) % num_classes
    return out


def epoch_order(pool_size: int, images_per_epoch: int, generator: torch.Generator) -> torch.Tensor:
    """Positions into the pool for one epoch: whole passes without replacement, cut to ``images_per_epoch``."""
    device = generator.device
    passes = -(-images_per_epoch // pool_size)  # ceil
    order = torch.cat([torch.randperm(pool_size, generator=generator, device=device) for _ in range(passes)])
    return order[:images_per_epoch]
