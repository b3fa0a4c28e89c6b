"""Per-update statistics of the rollout's values and advantages, and that every update logs them."""

from __future__ import annotations

import math

import pytest
import toy_env
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)
from test_ppo import collected_batch

from esper_agent.buffer import Advantages
from esper_agent.statistics import rollout_statistics

ADVANTAGE_KEYS = ("advantage/mean", "advantage/std", "advantage/clipped_fraction")


def test_advantage_mean_and_std_are_over_the_valid_steps_only() -> None:
    trainer = toy_env.make_toy_trainer(mode="NextStep")  # rows that end early: padding to leave out
    batch = collected_batch(trainer)
    valid = batch.rollout.valid
    assert not valid.all()
    batch.advantages[~valid] = 1e6  # padding must not count
    stats = rollout_statistics(batch.rollout, Advantages(batch.advantages, batch.returns))
    real = batch.advantages[valid].double()
    assert stats["advantage/mean"] == pytest.approx(real.mean().item(), rel=1e-5, abs=1e-7)
    assert stats["advantage/std"] == pytest.approx(real.std(correction=0).item(), rel=1e-5)


def test_every_update_logs_the_advantage_statistics() -> None:
    trainer = toy_env.make_toy_trainer()
    row = trainer.update()
    assert all(math.isfinite(row[key]) for key in ADVANTAGE_KEYS)
    assert row["advantage/std"] > 0 and 0 <= row["advantage/clipped_fraction"] <= row["ppo/clip_fraction"]
