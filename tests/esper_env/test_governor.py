"""The governor's collapse rule: a host stuck at chance is rolled back as a diverged one is."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

import esper_env  # noqa: F401  (registers the ids)
from esper_env.config import EnvConfig
from esper_env.episode import Episode, Measurement, collapsed, finish_epoch

CFG = EnvConfig(dataset="synthetic")  # patience 3, margin 0.02, peak 0.2, loss tolerance 0.01
CHANCE = 0.1
LN10 = math.log(10)


def _measurement(accuracy: float, loss: float, train_loss: float | None = None) -> Measurement:
    train_loss = loss if train_loss is None else train_loss
    return Measurement(train_loss=train_loss, train_accuracy=accuracy, val_loss=loss, val_accuracy=accuracy,
                       host_only_accuracy=accuracy, accuracy_without=(accuracy,) * 3, host_grad_norm=1.0,
                       seed_grad_norms=(0.0,) * 3, test_accuracy=None, images_trained=512)


def _first_collapse(curve: list[tuple[float, ...]], cfg: EnvConfig = CFG) -> int | None:
    """The epoch (1-based) at which the rule first fires on ``curve`` of (accuracy, loss[, training loss]), or
    None; the training loss is the validation loss where not given."""
    episode = Episode.fresh(3)
    for epoch, point in enumerate(curve, start=1):
        m = _measurement(*point)
        if collapsed(episode, m, cfg, CHANCE):
            return epoch
        finish_epoch(episode, m, cfg)
    return None


@pytest.mark.parametrize(("curve", "expected"), [
    # learned to 45%, then fell to chance: fires on the third epoch at chance
    ([(0.2, 2.0), (0.45, 1.5), (0.1, 2.9), (0.1, 3.4), (0.11, 2.5), (0.1, 2.4)], 5),
    # never learned, loss stuck at ln(10): a dead network, fires after three epochs
    ([(0.1, LN10 + 0.004), (0.1, LN10 - 0.002), (0.1, LN10), (0.1, LN10)], 3),
    # a healthy host
    ([(0.2, 2.1), (0.35, 1.8), (0.45, 1.5), (0.5, 1.4), (0.55, 1.3)], None),
    # at chance but the loss moves (still learning), and it never was clearly above chance
    ([(0.1, 2.6), (0.11, 2.4), (0.1, 2.35), (0.12, 2.2)], None),
    # a tiny host's noisy start: 23% is not clearly above chance
    ([(0.12, 5.5), (0.23, 2.5), (0.1, 4.8), (0.1, 4.5), (0.1, 7.3)], None),
    # a dip of two epochs to chance, then recovery
    ([(0.4, 1.7), (0.1, 3.0), (0.1, 3.1), (0.42, 1.6), (0.1, 3.0)], None),
    # loss near ln(10) but the host predicts well above chance: not a constant prediction
    ([(0.25, LN10), (0.26, LN10), (0.27, LN10)], None),
    # a slow start read through the weights' moving average (Esper-Synthetic-v0, family task, reset seed 14):
    # validation at ln(10) for three epochs while the training loss falls, then learning shows
    ([(0.098, 2.3025, 2.301), (0.1, 2.3022, 2.2735), (0.117, 2.3007, 2.2395), (0.189, 2.2925, 2.2061)], None),
    # the same validation curve with a training loss that has stopped falling: dead
    ([(0.098, 2.3025, 2.301), (0.1, 2.3022, 2.2735), (0.117, 2.3007, 2.2695)], 3),
])
def test_collapse_rule(curve, expected):
    assert _first_collapse(curve) == expected


def test_patience_zero_turns_collapse_detection_off():
    dead = [(0.1, LN10)] * 6
    assert _first_collapse(dead, EnvConfig(dataset="synthetic", collapse_patience=0)) is None
    assert _first_collapse(dead, EnvConfig(dataset="synthetic", collapse_patience=1)) == 1


@pytest.mark.parametrize(("field", "value"), [("collapse_patience", -1), ("collapse_accuracy_margin", 1.5),
                                              ("collapse_peak", -0.1), ("collapse_loss_tolerance", -0.01),
                                              ("collapse_peak", math.nan)])
def test_collapse_thresholds_out_of_range_are_refused_by_name(field, value):
    with pytest.raises(ValueError, match=f"^{field}="):
        EnvConfig(**{field: value})


def test_a_dead_host_is_rolled_back_and_ends_its_episode(tiny):
    """A zeroed last convolution makes every feature 0 and keeps it there (ReLU passes no gradient at 0): the host
    predicts one constant distribution, its loss finite and far below divergence_loss, so only the collapse rule
    can catch it. Default thresholds: three epochs stuck at ln(10)."""
    tiny["max_epochs"] = 8
    env = gym.make("Esper-Synthetic-v0", **tiny)
    env.reset(seed=0)
    with torch.no_grad():
        env.unwrapped.vector_env._engine.trainers[0].model.blocks[-1][0].weight.zero_()
    steps = []
    for _ in range(tiny["max_epochs"]):
        _, reward, terminated, truncated, info = env.step(np.zeros(5, dtype=np.int64))
        steps.append((info["val_accuracy"], info["val_loss"]))
        if terminated or truncated:
            break
    assert terminated and info["rollback"] and not truncated and info["epoch"] == 3, steps
    assert reward == -1.0
    assert all(abs(loss - LN10) <= 0.01 and accuracy <= CHANCE + 0.02 for accuracy, loss in steps), steps
