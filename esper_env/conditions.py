"""Hidden training conditions: how much data an episode's host really has, and how clean its labels are.

Growth pays only when the right size is not known in advance, so each episode of the task's version 2 draws a
condition that changes how much capacity is worth, and the observation never shows it: a controller must
infer it from the training curves. Two axes:

* **pool**: the number of distinct training images the episode draws from. Every epoch still trains on the
  same number of images (``images_per_epoch``), drawn from the pool in passes without replacement, so the
  step's cost and the FLOPs counter are the same under every condition and give nothing away;
* **label noise**: the fraction of the pool whose label is replaced, once per episode, by a uniformly drawn
  *other* class (so exactly that fraction is wrong). Validation and test labels stay clean.

A :class:`Condition` is pure data; :func:`draw_pool`, :func:`noisy_labels` and :func:`epoch_order` apply it
to device tensors with the episode's generator, so an episode is reproducible from its reset seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Condition:
    """One training condition of the hidden mixture."""

    name: str
    pool: int | None = None
    """Distinct training images the episode draws from (count); None = the whole training split."""
    label_noise: float = 0.0
    """Fraction of the pool's labels replaced by another class, in [0, 1)."""

    def __post_init__(self) -> None:
        if self.pool is not None and self.pool < 1:
            raise ValueError(f"pool={self.pool!r} for condition {self.name!r}; expected None or an integer >= 1")
        if not 0.0 <= self.label_noise < 1.0:
            raise ValueError(f"label_noise={self.label_noise!r} for condition {self.name!r}; expected [0, 1)")


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


def draw_pool(condition: Condition, train_size: int, generator: torch.Generator) -> torch.Tensor:
    """Indices into the training split of the episode's pool (int64 on the generator's device)."""
    size = train_size if condition.pool is None else condition.pool
    if size > train_size:
        raise ValueError(f"condition {condition.name!r} needs a pool of {size} images; the split has {train_size}")
    return torch.randperm(train_size, generator=generator, device=generator.device)[:size]


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
