"""The learning-rate schedules of an episode: each training step's fraction of the peak learning rate.

Pure arithmetic (no torch), the one place the schedules' maths lives: ``vector_env`` scales an epoch's factors
by the host's and the seeds' peak rates, :meth:`~esper_env.training.HostTrainer.begin_epoch` uploads them once
per epoch, and each training step reads its own row by batch index, so a captured step needs no host sync.
"""

from __future__ import annotations

import math

import numpy as np

from esper_env.config import LR_SCHEDULES

WSD_DECAY = 0.3  # "wsd" decays over this fraction of the episode's training steps


def step_factors(schedule: str, epochs: int, epoch: int, batches: int) -> np.ndarray:
    """Each of epoch ``epoch``'s ``batches`` training steps' fraction of the peak rate (float64, ``(batches,)``).

    ``"cosine"``: annealed from the peak to 0 over the episode's ``epochs``, one value per epoch (every step of
    an epoch gets the value at the epoch's start).

    ``"wsd"`` (warm-up, stable, decay), per step over the episode's ``epochs * batches`` steps: a linear warm-up
    over the first epoch (``1 / batches`` of the peak at the first step, the peak at the epoch's last), the peak,
    then a linear decay over the last ``WSD_DECAY`` of the steps that reaches exactly 0 at the episode's last
    step. The fast CIFAR-10 recipes warm up and decay per step; a module grown while the rate is stable loses
    no high-rate time by arriving late. Where the pieces overlap (episodes of one or two epochs), the smaller
    factor holds, so the last step is at 0 whatever the episode's length.
    """
    if epochs < 1 or batches < 1 or not 0 <= epoch < epochs:
        raise ValueError(f"epoch {epoch} of {epochs} with {batches} batches; expected epochs >= 1, batches >= 1 "
                         "and 0 <= epoch < epochs")
    if schedule == "cosine":
        return np.full(batches, 0.5 * (1.0 + math.cos(math.pi * epoch / epochs)))
    if schedule != "wsd":
        raise ValueError(f"lr_schedule={schedule!r}; expected one of {LR_SCHEDULES}")
    total = epochs * batches
    step = np.arange(epoch * batches, (epoch + 1) * batches, dtype=np.float64)
    decay_start = max(batches, round(total * (1.0 - WSD_DECAY)))  # the first step at the peak after the stable part
    warm_up = (step + 1.0) / batches
    decay = (total - 1 - step) / max(1, total - 1 - decay_start)
    return np.minimum(1.0, np.minimum(warm_up, decay))
