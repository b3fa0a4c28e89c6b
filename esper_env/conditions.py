"""Hidden training conditions: how much data an episode's host really has, how clean, and how hard the task is.

Growth pays only when the right size is not known in advance, so each episode can draw a condition that
changes how much capacity is worth, and the observation never shows it: a controller must infer it from the
training curves. The axes:

* **pool**: the number of distinct training images the episode draws from. Every epoch still trains on the
  same number of images, drawn from the pool in passes without replacement, so the step's cost and the FLOPs
  counter are the same under every condition and give nothing away;
* **label noise**: the fraction of the pool whose label is replaced, once per episode, by a uniformly drawn
  *other* class (so exactly that fraction is wrong). Validation and test labels stay clean;
* **classes in play**: the episode trains on, and is scored on, the images of only this many classes, drawn
  once per episode (the classifier keeps every output): fewer classes make the task easier, so capacity is
  worth less;
* **resolution**: images reduced to this side length by average pooling and enlarged back, at training and
  scoring alike: less information per image at the same input size and cost.

The env's ``condition`` argument takes a name of :data:`CONDITIONS`, :data:`MIXTURE` (each episode draws
one of the catalogue uniformly) or ``"mixture:<name>,<name>,..."`` (each episode draws one of those, uniformly:
a smaller hidden mixture, e.g. for a dataset too small for the catalogue's pools). This module is the catalogue
alone, pure Python without torch, so that the config can validate names; :mod:`esper_env.episode_data` applies a
condition to an episode's tensors.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    Condition("classes2", classes=2),
    Condition("classes5", classes=5),
    Condition("res16", resolution=16),
    Condition("res8", resolution=8),
    Condition("pool2k", pool=2_000),
    Condition("noise60", label_noise=0.6),
    Condition("pool5k-noise40", pool=5_000, label_noise=0.4),
)
"""The documented set, in the order the mixture draws from; names are what the ``condition`` argument takes. The
last three, the harshest (a 2k pool, 60% noise, both together at 5k and 40%), joined after screen v3, where the
nine before them left the per-condition oracle 1.35 points of return over the best single plan
(``docs/experiments/2026-11-28-screen-v4.md``)."""

MIXTURE = "mixture"
"""The ``condition`` value under which each episode draws one of :data:`CONDITIONS` uniformly."""

MIXTURE_OF = MIXTURE + ":"
"""The prefix of a ``condition`` value naming the conditions to draw from: ``"mixture:full,classes2"``."""

BY_NAME = {c.name: c for c in CONDITIONS}
CHOICES = (*BY_NAME, MIXTURE)
"""The single-word values the ``condition`` argument accepts (besides ``"mixture:<name>,<name>,..."``)."""


def condition_named(name: str) -> Condition:
    """The condition called ``name``, or a ValueError listing the known ones."""
    if name not in BY_NAME:
        raise ValueError(f"condition={name!r} is unknown; expected one of {sorted(BY_NAME)}")
    return BY_NAME[name]


def drawable(name: str) -> tuple[Condition, ...]:
    """The conditions an episode may draw under the ``condition`` argument ``name``: the whole catalogue for
    :data:`MIXTURE`, the listed ones for ``"mixture:<name>,<name>,..."`` (at least two, each once), else the one
    named; a ValueError naming the value otherwise."""
    if name == MIXTURE:
        return CONDITIONS
    if not name.startswith(MIXTURE_OF):
        return (condition_named(name),)
    names = name.removeprefix(MIXTURE_OF).split(",")
    if len(names) < 2 or len(set(names)) != len(names):
        raise ValueError(f"condition={name!r} must list at least two distinct conditions after {MIXTURE_OF!r}, "
                         f"comma-separated, e.g. 'mixture:full,classes2'")
    return tuple(condition_named(n) for n in names)


ACCEPTED = f"one of {CHOICES} or 'mixture:<name>,<name>,...' naming at least two of the catalogue"
"""What the ``condition`` argument accepts, in words, for error messages."""


def is_valid(name: str) -> bool:
    """Whether ``name`` is a value the ``condition`` argument accepts (:func:`drawable` says why not)."""
    try:
        drawable(name)
    except ValueError:
        return False
    return True
