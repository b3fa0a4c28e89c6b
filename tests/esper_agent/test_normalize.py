"""Running statistics and the two normalisers (their order within an update is tested in test_collect.py)."""

from __future__ import annotations

import numpy as np
import torch
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)

from esper_agent.normalize import ObservationNormalizer, RewardScaler, RunningMeanStd


def test_running_mean_std_matches_numpy_over_batches() -> None:
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=(rng.integers(1, 20), 4)) for _ in range(15)]
    stats = RunningMeanStd((4,))
    for batch in batches:
        stats.update(batch)
    data = np.concatenate(batches)
    assert np.allclose(stats.mean, data.mean(0)) and np.allclose(stats.var, data.var(0))
    assert stats.count == len(data)


def test_observation_normalizer_changes_only_on_commit() -> None:
    norm = ObservationNormalizer(2, clip=5.0)
    obs = np.array([[1.0, -1.0], [3.0, 1.0]])
    assert np.allclose(norm.normalize(obs), obs)  # no statistics yet: identity (within the clip)
    norm.observe(obs)
    assert np.allclose(norm.normalize(obs), obs)  # still frozen
    norm.commit()
    assert np.allclose(norm.normalize(obs), [[-1.0, -1.0], [1.0, 1.0]], atol=1e-4)
    assert np.abs(norm.normalize(np.array([[1e6, 0.0]]))).max() == 5.0  # clipped
    assert norm.normalize(obs).dtype == np.float32


def test_reward_scaler_uses_discounted_return_std_and_resets_at_episode_ends() -> None:
    scaler = RewardScaler(num_envs=2, gamma=0.5, clip=10.0)
    active, done = np.array([True, True]), np.array([False, True])
    scaler.observe(np.array([1.0, 2.0]), active, done)
    assert scaler.returns.tolist() == [1.0, 0.0]  # env 1 finished: its return restarts
    scaler.observe(np.array([1.0, 2.0]), np.array([True, False]), np.array([False, False]))
    assert scaler.returns.tolist() == [1.5, 0.0]
    scaler.commit()
    assert np.isclose(scaler.stats.var, np.var([1.0, 2.0, 1.5]))
    scaled = scaler.scale_rewards(torch.tensor([1.0, 1e9]))
    assert np.isclose(scaled[0].item(), 1.0 / np.sqrt(np.var([1.0, 2.0, 1.5]) + 1e-8), rtol=1e-5)
    assert scaled[1].item() == 10.0
    assert RewardScaler(2, 0.9, 10.0, enabled=False).scale_rewards(torch.tensor([1e9])).item() == 1e9


def test_state_round_trip() -> None:
    norm, scaler = ObservationNormalizer(3, 10.0), RewardScaler(2, 0.99, 10.0)
    norm.observe(np.random.default_rng(1).normal(size=(7, 3)))
    norm.commit()
    scaler.observe(np.array([0.3, -0.2]), np.array([True, True]), np.array([False, False]))
    scaler.commit()
    norm2, scaler2 = ObservationNormalizer(3, 10.0), RewardScaler(2, 0.99, 10.0)
    norm2.load_state_dict(norm.state_dict())
    scaler2.load_state_dict(scaler.state_dict())
    assert np.array_equal(norm2.stats.mean, norm.stats.mean) and norm2.stats.count == norm.stats.count
    assert scaler2.scale == scaler.scale and np.array_equal(scaler2.returns, scaler.returns)
