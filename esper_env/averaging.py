"""An exponential moving average of a host's weights, which validation and test read instead of the raw weights.

One epoch's validation accuracy moves by about a point from step to step on the CIFAR-10 ids even when nothing
changes (``benchmarks/results/screen/``: ``val_noise``), mostly because the weights at an epoch's last batch are
one noisy point of an SGD trajectory; the probes (``benchmarks/grow_cost.py``) found an average of the weights over
about an epoch cut that noise about threefold and left the final test accuracy unchanged. The average restarts at
the current weights whenever the set of weights changes (a seed planted, removed or joined; a reset or a
rollback), so it never mixes two architectures. Everything here is plain tensor code on fixed lists, so the
engine captures the update inside the training step's graph and the swap inside the evaluation's.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch


def step_decay(epochs: float, batches_per_epoch: int) -> float:
    """The per-batch decay of an average whose time constant is ``epochs`` epochs of ``batches_per_epoch``."""
    if not (epochs > 0 and batches_per_epoch >= 1):
        raise ValueError(f"epochs={epochs!r}, batches_per_epoch={batches_per_epoch!r}; expected > 0 and >= 1")
    return math.exp(-1.0 / (epochs * batches_per_epoch))


class WeightAverage:
    """The running average of a list of tensors (parameters, norm statistics), and a way to read through it."""

    def __init__(self, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"decay={decay!r}; expected a float in (0, 1)")
        self.decay = decay
        self.params: list[torch.Tensor] = []
        self.average: list[torch.Tensor] = []
        self._raw: list[torch.Tensor] = []

    @torch.no_grad()
    def track(self, tensors: list[torch.Tensor]) -> None:
        """Average ``tensors`` (a model's parameters and float buffers, held as themselves so that a copy of
        the model and of this average stay linked) from now on, starting at their current values. The same
        tensors as before keep their averages (a captured graph may still read them), which only restart."""
        if [(t.data_ptr(), t.shape) for t in tensors] == [(t.data_ptr(), t.shape) for t in self.params]:
            self.restart()
            return
        self.params = list(tensors)
        self.average = [t.detach().clone() for t in self.params]
        self._raw = [torch.empty_like(t) for t in self.params]

    @torch.no_grad()
    def restart(self) -> None:
        """Start the average again at the current values (the weights were replaced in place)."""
        torch._foreach_copy_(self.average, self.params)

    @torch.no_grad()
    def update(self) -> None:
        """Move the average one batch towards the current values."""
        torch._foreach_lerp_(self.average, self.params, 1.0 - self.decay)

    @contextmanager
    def swapped_in(self) -> Iterator[None]:
        """Within the block the parameters hold the average; the raw values are back after it."""
        with torch.no_grad():
            torch._foreach_copy_(self._raw, self.params)
            torch._foreach_copy_(self.params, self.average)
        try:
            yield
        finally:
            with torch.no_grad():
                torch._foreach_copy_(self.params, self._raw)
