"""Keeping the policy of the best window of training returns (esper_agent.selection, select_best_window)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)

from esper_agent.config import AgentConfig
from esper_agent.evaluate import policy_from_checkpoint, which_policy
from esper_agent.selection import BestPolicy
from esper_agent.trainer import Trainer

SMALL = {"max_epochs": 6, "device": "cpu", "synthetic_train_size": 256, "synthetic_val_size": 64,
         "min_prune_age": 0}


def tagged(tag: float) -> dict:
    """A stand-in snapshot that says which rollout it collected."""
    return {"policy": {"tag": tag}, "obs_norm": {}}


def test_the_best_window_mean_wins_and_a_tie_keeps_the_earlier_policy() -> None:
    best = BestPolicy(2)
    kept = [best.observe(r, u, tagged(u)) for u, r in enumerate([1.0, 3.0, 2.0, 0.0, 5.0, 0.0], start=1)]
    # windows end at updates 2..6 with means 2, 2.5, 1, 2.5, 2.5: update 3 is best, and the later ties do not win
    assert kept == [False, True, True, False, False, False]
    assert best.update == 3 and best.score == 2.5 and best.best == tagged(3)
    assert best.metrics() == {"selection/best_return": 2.5, "selection/best_update": 3.0}


def test_a_rollout_without_finished_episodes_restarts_the_window() -> None:
    best = BestPolicy(2)
    for u, r in enumerate([1.0, math.nan, 4.0, 4.0], start=1):
        best.observe(r, u, tagged(u))
    assert best.update == 4 and best.score == 4.0  # the window 1, 4 across the gap was never scored


def test_before_a_whole_window_nothing_is_kept() -> None:
    best = BestPolicy(3)
    best.observe(1.0, 1, tagged(1))
    assert best.best is None and math.isnan(best.metrics()["selection/best_update"])
    with pytest.raises(ValueError, match="window=0: expected a number of rollouts >= 1"):
        BestPolicy(0)


def test_the_state_round_trips_and_refuses_another_window() -> None:
    best = BestPolicy(2)
    for u, r in enumerate([1.0, 2.0, 0.5], start=1):
        best.observe(r, u, tagged(u))
    again = BestPolicy(2)
    again.load_state_dict(best.state_dict())
    assert again.observe(3.0, 4, tagged(4)) and best.observe(3.0, 4, tagged(4))  # with the carried 0.5: 1.75 > 1.5
    assert again.state_dict() == best.state_dict()
    with pytest.raises(ValueError, match="scored windows of 2 rollouts, this one 3"):
        BestPolicy(3).load_state_dict(best.state_dict())


def trainer(window: int, imitation_updates: int = 0, updates: int = 4) -> Trainer:
    envs = gym.make_vec("Esper-Synthetic-v0", num_envs=2, **SMALL)
    cfg = AgentConfig(rollout_steps=6, hidden_size=16, num_minibatches=2, learning_rate=3e-3,
                      imitation_updates=imitation_updates, select_best_window=window)
    return Trainer(envs, cfg, seed=0, total_updates=updates)


def weights(policy: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in policy.state_dict().items()}


def test_the_trainer_keeps_the_policy_that_collected_the_best_windows_last_rollout() -> None:
    t = trainer(window=2, imitation_updates=1, updates=5)
    before, returns = [], []
    while t.update_index < t.total_updates:
        before.append((weights(t.policy), t.obs_norm.state_dict()))
        returns.append(t.update()["episode/return_mean"])
    # PPO rollouts are updates 2..5 (update 1 imitated the heuristic); windows end at updates 3, 4 and 5
    means = {u: (returns[u - 2] + returns[u - 1]) / 2 for u in (3, 4, 5)}
    best_update = max(means, key=lambda u: (means[u], -u))
    assert t.selection.update == best_update and t.selection.score == pytest.approx(means[best_update])
    policy, obs_norm = t.selected_policy()
    kept_weights, kept_norm = before[best_update - 1]  # the policy before that update collected its rollout
    for name, value in weights(policy).items():
        torch.testing.assert_close(value, kept_weights[name], rtol=0, atol=0)
    np.testing.assert_array_equal(obs_norm.state_dict()["mean"], kept_norm["mean"])
    assert not all(torch.equal(v, weights(t.policy)[k]) for k, v in kept_weights.items())  # not the last policy
    assert policy is not t.policy  # a copy: playing it leaves the trainer's policy alone


def test_checkpoints_keep_the_choice_and_evaluate_plays_it_unless_told_otherwise() -> None:
    t = trainer(window=1, updates=3)
    list(t.train())
    payload = t.state_dict()
    resumed = trainer(window=1, updates=3)
    resumed.load_state_dict(payload)
    assert resumed.selection.state_dict() == t.selection.state_dict()
    kept, _ = policy_from_checkpoint(payload, "cpu")
    last, _ = policy_from_checkpoint(payload, "cpu", last=True)
    expected, _ = t.selected_policy()
    for name, value in weights(kept).items():
        torch.testing.assert_close(value, weights(expected)[name], rtol=0, atol=0)
        torch.testing.assert_close(weights(last)[name], weights(t.policy)[name], rtol=0, atol=0)
    assert f"collected update {t.selection.update}'s rollout" in which_policy(payload, last=False)
    assert which_policy(payload, last=True) == "the last policy, after update 3"


def test_without_selection_the_trained_policy_is_handed_out() -> None:
    t = trainer(window=0, updates=1)
    row = t.update()
    assert t.selection is None and "selection/best_update" not in row
    assert t.selected_policy() == (t.policy, t.obs_norm) and t.state_dict()["selection"] is None
    with pytest.raises(ValueError, match="select_best_window=-1 is out of range; expected an integer >= 0"):
        AgentConfig(select_best_window=-1)
