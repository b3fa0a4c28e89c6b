"""Rollout storage and GAE against a naive reference loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)

from esper_agent.buffer import Advantages, Rollout, RolloutStorage, compute_gae, first_episode, subtract_group_baseline
from esper_agent.policy import ActOutput, LSTMState
from esper_env import spaces


def naive_gae(r: Rollout, rewards: np.ndarray, lengths: np.ndarray, gamma: float, lam: float) -> np.ndarray:
    """Textbook GAE written per env and per step, in float64, reading only the stored prefix of each row."""
    values, boot, last = (x.double().numpy() for x in (r.values, r.bootstrap_values, r.last_values))
    term, trunc = r.terminated.numpy(), r.truncated.numpy()
    adv = np.zeros_like(values)
    for i in range(values.shape[0]):
        gae = 0.0
        for t in reversed(range(lengths[i])):
            if term[i, t]:
                next_value, keep = 0.0, 0.0
            elif trunc[i, t]:
                next_value, keep = boot[i, t], 0.0
            elif t == lengths[i] - 1:
                next_value, keep = last[i], 1.0
            else:
                next_value, keep = values[i, t + 1], 1.0
            delta = rewards[i, t] + gamma * next_value - values[i, t]
            gae = delta + gamma * lam * keep * gae
            adv[i, t] = gae
    return adv


def random_rollout(seed: int, num_envs: int = 6, steps: int = 12) -> tuple[Rollout, np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, steps + 1, num_envs)
    lengths[0] = steps
    valid = np.arange(steps)[None, :] < lengths[:, None]

    def garbage_outside(x: np.ndarray) -> torch.Tensor:  # padding holds huge numbers: they must not leak in
        return torch.as_tensor(np.where(valid, x, 1e6), dtype=torch.float32)

    term = (rng.random((num_envs, steps)) < 0.12) & valid
    trunc = (rng.random((num_envs, steps)) < 0.12) & valid  # some steps are both: termination wins
    hidden = torch.zeros(num_envs, 4)
    rollout = Rollout(
        obs=torch.zeros(num_envs, steps, 1), actions=torch.zeros(num_envs, steps, 5, dtype=torch.long),
        used_masks=torch.ones(num_envs, steps, 21, dtype=torch.bool), log_probs=torch.zeros(num_envs, steps),
        values=garbage_outside(rng.normal(size=(num_envs, steps))),
        rewards=garbage_outside(rng.normal(size=(num_envs, steps))),
        terminated=torch.as_tensor(term), truncated=torch.as_tensor(trunc),
        episode_start=torch.zeros(num_envs, steps, dtype=torch.bool), valid=torch.as_tensor(valid),
        bootstrap_values=garbage_outside(np.where(trunc, rng.normal(size=(num_envs, steps)), 0.0)),
        last_values=torch.as_tensor(rng.normal(size=num_envs), dtype=torch.float32),
        initial_state=LSTMState(hidden, hidden), resets_inside=np.ones(num_envs, bool))
    return rollout, lengths


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("gamma", "lam"), [(0.995, 0.95), (0.9, 1.0), (1.0, 0.0)])
def test_gae_matches_naive_reference(seed: int, gamma: float, lam: float) -> None:
    rollout, lengths = random_rollout(seed)
    got = compute_gae(rollout, rollout.rewards, gamma, lam)
    want = naive_gae(rollout, rollout.rewards.double().numpy(), lengths, gamma, lam)
    assert np.allclose(got.advantages.numpy(), want, atol=1e-4)
    valid = rollout.valid
    assert torch.equal(got.advantages[~valid], torch.zeros_like(got.advantages[~valid]))
    assert torch.allclose(got.returns[valid], (got.advantages + rollout.values)[valid])


def test_storage_rows_are_contiguous_and_padded() -> None:
    sizes = spaces.head_sizes(3)
    storage = RolloutStorage(3, 4, 2, sizes, 8, "cpu")
    storage.begin(LSTMState(torch.ones(3, 8), torch.ones(3, 8)))
    for step in range(4):
        active = np.array([True, step != 1, step < 2])  # env 1 skips a (NEXT_STEP reset) step, env 2 stops
        starts = np.array([step == 0, step in (0, 2), step == 0])  # env 1 starts a new episode after the skip
        state = LSTMState(torch.zeros(3, 8), torch.zeros(3, 8))
        out = ActOutput(torch.full((3, 5), step), torch.ones(3, sum(sizes), dtype=torch.bool),
                        torch.full((3,), -1.0), torch.full((3,), float(step)), state)
        flags = np.array([[step, 0, 0, start] for start in starts], np.float32)
        storage.add(active, torch.full((3, 2), float(step)), out, flags)
    rollout = storage.finish(torch.zeros(3))
    assert rollout.valid.tolist() == [[True] * 4, [True, True, True, False], [True, True, False, False]]
    assert rollout.values[1].tolist() == [0.0, 2.0, 3.0, 0.0]  # no hole where the step was skipped
    assert rollout.obs[2, :, 0].tolist() == [0.0, 1.0, 0.0, 0.0]
    assert rollout.episode_start[1].tolist() == [True, True, False, False]
    assert rollout.resets_inside.tolist() == [False, True, False]  # decides the one-call LSTM replay
    with pytest.raises(RuntimeError, match="full"):
        storage.add(np.array([True, False, False]), torch.zeros(3, 2), out, flags)


def grouped_rollout(advantage_rows: list[list[float]], starts: list[list[bool]] | None = None,
                    valid: list[list[bool]] | None = None) -> tuple[Rollout, Advantages]:
    adv = torch.tensor(advantage_rows)
    n, t = adv.shape
    rollout, _ = random_rollout(0, n, t)
    start = torch.zeros(n, t, dtype=torch.bool) if starts is None else torch.tensor(starts)
    start[:, 0] = True  # every row starts an episode at the rollout's reset
    ok = torch.ones(n, t, dtype=torch.bool) if valid is None else torch.tensor(valid)
    return rollout._replace(episode_start=start, valid=ok), Advantages(adv, torch.full((n, t), 7.0))


def test_group_baseline_is_the_mean_of_the_other_rows_at_each_step() -> None:
    rollout, adv = grouped_rollout([[1, 2, 3], [3, 2, 1], [5, 5, 5], [1, 1, 1]])
    got = subtract_group_baseline(adv, rollout, 2)
    assert got.advantages.tolist() == [[-2, 0, 2], [2, 0, -2], [4, 4, 4], [-4, -4, -4]]
    assert torch.equal(got.returns, adv.returns)  # the critic's targets do not move
    got3 = subtract_group_baseline(*reversed(grouped_rollout([[3.0], [0.0], [6.0]])), 3)
    assert got3.advantages.flatten().tolist() == [0.0, -4.5, 4.5]  # leave one out: 3 - (0 + 6) / 2


def test_group_baseline_skips_later_episodes_padding_and_lone_rows() -> None:
    starts = [[True, False, True], [True, False, False]]  # row 0 starts a second episode at step 2
    valid = [[True, True, True], [True, True, False]]
    rollout, adv = grouped_rollout([[1, 2, 3], [5, 6, 0]], starts, valid)
    got = subtract_group_baseline(adv, rollout, 2)
    assert first_episode(rollout).tolist() == [[True, True, False], [True, True, False]]
    assert got.advantages.tolist() == [[-4, -4, 3], [4, 4, 0]]  # step 2: another episode, and padding


def test_group_of_one_is_plain_gae_and_bad_sizes_are_refused() -> None:
    rollout, adv = grouped_rollout([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    assert subtract_group_baseline(adv, rollout, 1) is adv
    with pytest.raises(ValueError, match="seed_group_size=2 must be >= 1 and divide the rollout's 3 rows"):
        subtract_group_baseline(adv, rollout, 2)
