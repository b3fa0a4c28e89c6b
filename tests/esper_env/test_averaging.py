"""The weights' moving average that validation and test read (``ema_epochs``): it is the average of the
training trajectory, it changes no training, and it restarts whenever the weights change (CPU, synthetic data)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from esper_env.averaging import WeightAverage, step_decay
from esper_env.blueprints import FAMILY_BLUEPRINTS
from esper_env.config import EnvConfig
from esper_env.data import load_dataset
from esper_env.training import HostTrainer, MetricLayout

SMALL = {"dataset": "synthetic", "device": "cpu", "batch_size": 64, "synthetic_train_size": 256,
         "synthetic_val_size": 64, "synthetic_test_size": 64, "synthetic_image_size": 16, "host": "family",
         "family_widths": (4, 8, 8), "family_stem": 4, "max_widths": (8, 16, 16)}
WIDEN = next(i for i, b in enumerate(FAMILY_BLUEPRINTS) if b.name == "widen_s")


def _trainer(ema_epochs: float) -> HostTrainer:
    cfg = EnvConfig(**SMALL, ema_epochs=ema_epochs)
    trainer = HostTrainer(cfg, load_dataset(cfg, torch.device("cpu")), torch.zeros(MetricLayout(cfg.num_slots).size),
                          None)
    trainer.reset(init_seed=3, data_seed=5)
    return trainer


def _epoch(trainer: HostTrainer, alpha: float = 0.0) -> list[torch.Tensor]:
    """Train one epoch; returns every parameter after each batch."""
    n = trainer.cfg.num_slots
    trainer.begin_epoch([alpha] * n + [0.0, 1.0] * n, np.full((trainer.batches_per_epoch, 2), 0.3))
    seen = []
    for _ in range(trainer.batches_per_epoch):
        trainer.train_step()
        seen.append([t.detach().clone() for t in trainer.averaged_tensors()])
    return seen


def test_the_decay_makes_the_time_constant_in_epochs() -> None:
    assert step_decay(2.0, 50) == pytest.approx(math.exp(-1 / 100))
    for epochs, batches in ((0.0, 10), (-1.0, 10), (1.0, 0)):
        with pytest.raises(ValueError, match="expected > 0"):
            step_decay(epochs, batches)
    with pytest.raises(ValueError, match="decay=1.0"):
        WeightAverage(1.0)


def test_the_average_follows_the_trajectory_and_is_read_only_inside_the_swap() -> None:
    trainer = _trainer(0.5)
    start = [t.detach().clone() for t in trainer.averaged_tensors()]
    trajectory = _epoch(trainer)
    decay = trainer.average.decay
    expected = start
    for step in trajectory:
        expected = [decay * a + (1 - decay) * p for a, p in zip(expected, step, strict=True)]
    for got, want in zip(trainer.average.average, expected, strict=True):
        assert torch.allclose(got, want, atol=1e-6)
    raw = [t.detach().clone() for t in trainer.averaged_tensors()]
    with trainer.average.swapped_in():
        assert all(torch.equal(t, a) for t, a in zip(trainer.averaged_tensors(), trainer.average.average, strict=True))
    assert all(torch.equal(t, r) for t, r in zip(trainer.averaged_tensors(), raw, strict=True))


def test_reading_the_average_changes_what_is_read_but_no_training() -> None:
    plain, averaged = _trainer(0.0), _trainer(0.5)
    for trainer in (plain, averaged):
        for _ in range(2):
            _epoch(trainer)
            trainer.evaluate()
    for a, b in zip(plain.averaged_tensors(), averaged.averaged_tensors(), strict=True):
        assert torch.equal(a, b)  # the swap hands the raw weights back exactly
    evals = slice(plain.layout.eval.start, plain.layout.eval.start + 2)
    assert not torch.equal(plain.metrics[evals], averaged.metrics[evals])


def test_the_average_restarts_when_the_weights_change() -> None:
    trainer = _trainer(0.5)
    _epoch(trainer)
    buffers = trainer.average.average
    trainer.remove_seed(0)  # an empty slot: the same parameters keep their buffers (a graph may read them)
    assert trainer.average.average is buffers
    assert all(torch.equal(a, p) for a, p in zip(buffers, trainer.averaged_tensors(), strict=True))
    trainer.plant_seed(1, WIDEN, gated=False, init_seed=7)
    assert len(trainer.average.average) == len(trainer.averaged_tensors()) > len(buffers)
    _epoch(trainer, alpha=1.0)
    trainer.join_seed(1, init_seed=8)
    assert all(torch.equal(a, p) for a, p in zip(trainer.average.average, trainer.averaged_tensors(), strict=True))
    _epoch(trainer)
    trainer.restore_snapshot()
    assert all(torch.equal(a, p) for a, p in zip(trainer.average.average, trainer.averaged_tensors(), strict=True))


def test_a_copied_trainer_averages_its_own_weights() -> None:
    import copy

    trainer = _trainer(0.5)
    twin = copy.deepcopy(trainer)
    assert all(a is b for a, b in zip(twin.average.params, twin.averaged_tensors(), strict=True))
