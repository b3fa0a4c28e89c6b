"""Replay of the last rollouts in each PPO update (``AgentConfig.replay_rollouts``, ``esper_agent.extensions``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import toy_env
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)

from esper_agent import trainer as trainer_module
from esper_agent.checkpoint import load_checkpoint, save_checkpoint
from esper_agent.config import AgentConfig
from esper_agent.extensions import Replay
from esper_agent.ppo import TrainBatch, replay_rows


def recording_updates(monkeypatch: pytest.MonkeyPatch) -> list[tuple[TrainBatch, AgentConfig, dict[str, Any]]]:
    """Each PPO update's batch and config, with the policy's weights before it (``ppo_update`` is wrapped)."""
    seen: list[tuple[TrainBatch, AgentConfig, dict[str, Any]]] = []
    real = trainer_module.ppo_update

    def record(policy, optimizer, batch, cfg, *args, **kwargs):
        weights = {k: v.clone() for k, v in policy.state_dict().items()}
        seen.append((batch, cfg, weights))
        return real(policy, optimizer, batch, cfg, *args, **kwargs)

    monkeypatch.setattr(trainer_module, "ppo_update", record)
    return seen


def test_off_an_update_learns_from_its_own_rollout_only() -> None:
    replay, cfg = Replay(AgentConfig()), AgentConfig()
    batch = TrainBatch(None, torch.zeros(2, 3), torch.zeros(2, 3))  # type: ignore[arg-type]
    assert replay.batch(None, batch, cfg) == (batch, cfg)  # type: ignore[arg-type]
    assert replay.metrics() == {} and replay.state_dict() is None and replay.held == []


def test_older_rollouts_are_rescored_by_the_policy_and_weighted_by_the_truncated_ratio(monkeypatch) -> None:
    seen = recording_updates(monkeypatch)
    trainer = toy_env.make_toy_trainer(replay_rollouts=3, num_minibatches=2)
    n = trainer.driver.num_envs
    for _ in range(4):
        trainer.update()
    sizes = [b.rollout.valid.shape[0] for b, _, _ in seen]
    assert sizes == [n, 2 * n, 3 * n, 3 * n]  # the new rollout and at most two before it
    assert [cfg.num_minibatches for _, cfg, _ in seen] == [2, 4, 6, 6]  # two per rollout: a minibatch keeps its size

    batch, _, weights = seen[3]
    trainer.policy.load_state_dict(weights)  # the policy as it stood at the start of update 4
    for i in range(2):  # rows 0..n: update 2's rollout; n..2n: update 3's; as their own updates got them
        own, rows = seen[i + 1][0], slice(i * n, (i + 1) * n)
        behaviour, advantages = own.rollout.log_probs[-n:], own.advantages[-n:]
        assert torch.equal(batch.rollout.obs[rows], own.rollout.obs[-n:])
        with torch.no_grad():
            _, valid, ev = replay_rows(trainer.policy, batch.rollout, torch.arange(i * n, (i + 1) * n))
        torch.testing.assert_close(batch.rollout.log_probs[rows][valid], ev.log_prob[valid])
        expected = advantages * (ev.log_prob - behaviour).exp().clamp(max=1.0)
        torch.testing.assert_close(batch.advantages[rows][valid], expected[valid])
        assert not torch.equal(batch.rollout.log_probs[rows][valid], behaviour[valid])  # the policy did move
    newest = seen[3][0]
    assert torch.equal(batch.rollout.log_probs[2 * n:], newest.rollout.log_probs[2 * n:])
    assert torch.equal(batch.advantages[2 * n:], newest.advantages[2 * n:])  # the new rollout as collected
    metrics = trainer.replay.metrics()
    assert metrics["replay/rollouts"] == 3 and 0 < metrics["replay/weight_mean"] <= 1


def test_a_held_rollout_is_a_copy_that_the_next_rollout_does_not_overwrite() -> None:
    trainer = toy_env.make_toy_trainer(replay_rollouts=2)
    trainer.update()
    held = trainer.replay.held[0].rollout
    obs = held.obs.clone()
    trainer.update()
    assert torch.equal(trainer.replay.held[0].rollout.obs, obs)  # still the first rollout's
    assert not torch.equal(trainer.replay.held[1].rollout.obs, obs)  # the storage now holds the second


def test_a_run_resumed_from_a_checkpoint_replays_the_same_rollouts(tmp_path: Path) -> None:
    straight = toy_env.make_toy_trainer(replay_rollouts=3)
    for _ in range(4):
        straight.update()
    first = toy_env.make_toy_trainer(replay_rollouts=3)
    for _ in range(2):
        first.update()
    path = save_checkpoint(tmp_path / "ckpt.pt", first.state_dict())
    resumed = toy_env.make_toy_trainer(replay_rollouts=3)
    resumed.load_state_dict(load_checkpoint(path))  # weights_only: the held rollouts are plain tensors
    assert len(resumed.replay.held) == 2
    for _ in range(2):
        resumed.update()
    for name, value in straight.policy.state_dict().items():
        assert torch.equal(value, resumed.policy.state_dict()[name]), name


def test_replay_rollouts_must_be_a_positive_count() -> None:
    with pytest.raises(ValueError, match="replay_rollouts"):
        AgentConfig(replay_rollouts=0)
