"""What a host and a reward need to know about a dataset, as one frozen value. Pure Python: no torch.

:class:`DatasetSpec` is produced by the dataset itself when it is loaded (``esper_env.data``), so that the
classifier's width, the input channels, the reward's starting accuracy and the normalisation all come from the
data in use rather than from constants that silently assume CIFAR-10.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset's shape and statistics: classes, image geometry, split sizes, chance level, normalisation."""

    name: str
    """Which dataset (``"cifar10"``, ``"synthetic"``, ...)."""
    num_classes: int
    """Label values are ``0 .. num_classes - 1`` (count); the host's classifier has this many outputs."""
    image_size: int
    """Side length of the square images (pixels)."""
    channels: int
    """Colour channels of an image (count); the host's first convolution reads this many."""
    train_size: int
    """Images in the training split (count)."""
    val_size: int
    """Images in the validation split used for reward and observation (count)."""
    test_size: int
    """Images in the test split, used only for reporting (count)."""
    chance_accuracy: float
    """Accuracy of a guess that ignores the image (fraction): the reward's accuracy before the first epoch."""
    mean: tuple[float, ...]
    """Per-channel mean of the training images scaled to [0, 1], subtracted before the host sees them."""
    std: tuple[float, ...]
    """Per-channel (population) standard deviation of the training images scaled to [0, 1]."""

    def __post_init__(self) -> None:
        _check(self, "num_classes", self.num_classes >= 2, "an integer >= 2")
        for name in ("image_size", "channels", "train_size", "val_size", "test_size"):
            _check(self, name, getattr(self, name) >= 1, "an integer >= 1")
        _check(self, "chance_accuracy", 0.0 < self.chance_accuracy <= 1.0, "a fraction in (0, 1]")
        _check(self, "mean", len(self.mean) == self.channels and all(map(math.isfinite, self.mean)),
               f"{self.channels} finite floats, one per channel")
        _check(self, "std", len(self.std) == self.channels and all(math.isfinite(s) and s > 0 for s in self.std),
               f"{self.channels} finite floats > 0, one per channel")


def balanced_chance(num_classes: int) -> float:
    """Chance accuracy with ``num_classes`` equally likely classes (fraction)."""
    return 1.0 / num_classes


def _check(spec: DatasetSpec, name: str, ok: bool, expected: str) -> None:
    if not ok:
        raise ValueError(f"DatasetSpec {spec.name!r}: {name}={getattr(spec, name)!r}; expected {expected}")


__all__ = ["DatasetSpec", "balanced_chance"]
