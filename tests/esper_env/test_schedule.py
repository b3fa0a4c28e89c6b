"""The learning-rate schedules: the per-step maths of ``esper_env.schedule`` and the rates the optimizer really
applies at each training step of an episode (CPU, synthetic data)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from esper_env.optim import NesterovSGD
from esper_env.schedule import WSD_DECAY, step_factors

TINY = {"device": "cpu", "max_epochs": 4, "batch_size": 64, "train_images_per_epoch": 320, "eval_batch_size": 256,
        "synthetic_train_size": 320, "synthetic_val_size": 64, "synthetic_test_size": 64, "host_widths": [4, 8],
        "host_lr": 0.3, "seed_lr": 0.07}
BATCHES = 5  # TINY's training steps per epoch: 320 images in batches of 64


def _episode_factors(schedule: str, epochs: int, batches: int) -> np.ndarray:
    return np.concatenate([step_factors(schedule, epochs, e, batches) for e in range(epochs)])


def _cosine_before(epochs: int, epoch: int) -> float:
    """The per-epoch cosine factor as the env computed it before schedules were per step (its exact arithmetic)."""
    return 0.5 * (1.0 + math.cos(math.pi * epoch / epochs))


def test_wsd_warms_up_over_the_first_epoch_holds_the_peak_and_decays_to_zero_at_the_last_step() -> None:
    epochs, batches = 20, 7
    f = _episode_factors("wsd", epochs, batches)
    total = epochs * batches
    assert f.shape == (total,)
    assert f[0] == pytest.approx(1 / batches) and f[batches - 1] == 1.0  # warm-up: ~0 to the peak in one epoch
    assert np.allclose(np.diff(f[:batches]), 1 / batches)  # linear
    decay_start = round(total * (1 - WSD_DECAY))
    assert np.all(f[batches - 1:decay_start + 1] == 1.0)  # stable at the peak
    assert f[-1] == 0.0 and f[-2] > 0.0  # exactly 0 at the episode's last step, not before
    decay = f[decay_start:]
    assert np.allclose(np.diff(decay), -1 / (total - 1 - decay_start))  # linear, over the last 30% of the steps
    assert (total - decay_start) / total == pytest.approx(WSD_DECAY, abs=1 / total)


@pytest.mark.parametrize("epochs", range(1, 7))
@pytest.mark.parametrize("batches", range(1, 6))
def test_wsd_rises_then_falls_within_zero_and_one_and_ends_at_zero(epochs: int, batches: int) -> None:
    """Every episode length, even those too short for all three pieces: the factors rise to their top, then fall,
    stay in [0, 1], and the last step is at 0."""
    f = _episode_factors("wsd", epochs, batches)
    top = int(np.argmax(f))
    assert np.all(np.diff(f[:top + 1]) > 0) and np.all(np.diff(f[top:]) <= 0)
    assert np.all((f >= 0) & (f <= 1)) and f[-1] == 0.0


def test_cosine_is_the_per_epoch_value_at_every_step_bit_for_bit() -> None:
    for epochs in (1, 4, 20, 25):
        for epoch in range(epochs):
            factors = step_factors("cosine", epochs, epoch, BATCHES)
            assert factors.dtype == np.float64
            assert all(value == _cosine_before(epochs, epoch) for value in factors.tolist())


@pytest.mark.parametrize(("schedule", "epochs", "epoch", "batches"), [
    ("linear", 4, 0, 5), ("wsd", 4, 4, 5), ("wsd", 4, -1, 5), ("cosine", 0, 0, 5), ("cosine", 4, 0, 0)])
def test_a_bad_schedule_or_step_is_named(schedule: str, epochs: int, epoch: int, batches: int) -> None:
    with pytest.raises(ValueError, match="expected"):
        step_factors(schedule, epochs, epoch, batches)


def _applied_rates(monkeypatch: pytest.MonkeyPatch, **kwargs) -> np.ndarray:
    """The (host, seed) learning rates the optimizer got at every training step of one WAIT episode."""
    seen: list[torch.Tensor] = []
    step = NesterovSGD.step

    def recording(self: NesterovSGD, lr: torch.Tensor) -> None:
        seen.append(lr.detach().clone())
        step(self, lr)

    monkeypatch.setattr(NesterovSGD, "step", recording)
    env = gym.make_vec("Esper-Synthetic-v0", num_envs=1, vectorization_mode="vector_entry_point", **{**TINY, **kwargs})
    env.reset(seed=0)
    for _ in range(TINY["max_epochs"]):
        env.step(np.zeros((1, env.single_action_space.shape[0]), np.int64))
    env.close()
    return torch.stack(seen).numpy()


def test_the_optimizer_applies_the_wsd_rate_of_each_step(monkeypatch: pytest.MonkeyPatch) -> None:
    rates = _applied_rates(monkeypatch, lr_schedule="wsd")
    factors = _episode_factors("wsd", TINY["max_epochs"], BATCHES)
    expected = np.outer(factors, (TINY["host_lr"], TINY["seed_lr"])).astype(np.float32)
    assert rates.dtype == np.float32 and np.array_equal(rates, expected)
    assert rates[0, 0] == np.float32(TINY["host_lr"] / BATCHES) and rates[-1, 0] == 0.0


def test_the_optimizer_applies_the_cosine_rate_of_the_epoch_at_each_step_bit_for_bit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What the env uploaded before rates were per step: two Python floats per epoch, made float32 by torch."""
    rates = _applied_rates(monkeypatch)  # the default schedule is cosine
    epochs = TINY["max_epochs"]
    before = [torch.tensor([TINY["host_lr"] * _cosine_before(epochs, e), TINY["seed_lr"] * _cosine_before(epochs, e)],
                           dtype=torch.float32) for e in range(epochs) for _ in range(BATCHES)]
    assert torch.equal(torch.from_numpy(rates), torch.stack(before))
