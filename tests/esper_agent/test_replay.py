"""Replay of the last rollouts in each PPO update (``AgentConfig.replay_rollouts``) and the averaged proximal policy
(``AgentConfig.proximal_ewma``), both in ``esper_agent.extensions.Replay``."""

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


@pytest.mark.parametrize("options", [{"replay_rollouts": 3}, {"replay_rollouts": 3, "proximal_ewma": 0.5},
                                     {"proximal_ewma": 0.5}])
def test_a_run_resumed_from_a_checkpoint_replays_the_same_rollouts(tmp_path: Path, options: dict[str, Any]) -> None:
    straight = toy_env.make_toy_trainer(**options)
    for _ in range(4):
        straight.update()
    first = toy_env.make_toy_trainer(**options)
    for _ in range(2):
        first.update()
    path = save_checkpoint(tmp_path / "ckpt.pt", first.state_dict())
    resumed = toy_env.make_toy_trainer(**options)
    resumed.load_state_dict(load_checkpoint(path))  # weights_only: the held rollouts and the average are plain tensors
    assert len(resumed.replay.held) == (2 if options.get("replay_rollouts", 1) > 1 else 0)
    assert (resumed.replay.average is None) == ("proximal_ewma" not in options)
    for _ in range(2):
        resumed.update()
    for name, value in straight.policy.state_dict().items():
        assert torch.equal(value, resumed.policy.state_dict()[name]), name


def test_the_average_starts_as_a_copy_of_the_policy_and_moves_towards_it_by_the_decay(monkeypatch) -> None:
    seen = recording_updates(monkeypatch)
    trainer = toy_env.make_toy_trainer(proximal_ewma=0.25)
    trainer.update()
    names = [name for name, _ in trainer.policy.named_parameters()]
    average = trainer.replay.average
    assert average is not None and len(average.average) == len(names)
    for name, value in zip(names, average.average, strict=True):
        assert torch.equal(value, seen[0][2][name]), name  # the policy at the start of update 1
    trainer.update()
    for name, value in zip(names, average.average, strict=True):
        torch.testing.assert_close(value, 0.25 * seen[0][2][name] + 0.75 * seen[1][2][name])


def test_the_policy_holds_the_average_only_while_it_rescores() -> None:
    trainer = toy_env.make_toy_trainer(proximal_ewma=0.5)
    for _ in range(2):
        trainer.update()
    before = {name: value.clone() for name, value in trainer.policy.named_parameters()}
    with trainer.replay._proximal(trainer.policy):
        inside = {name: value.clone() for name, value in trainer.policy.named_parameters()}
    average = trainer.replay.average.average
    assert all(torch.equal(inside[name], mean) for name, mean in zip(before, average, strict=True))
    assert any(not torch.equal(inside[name], before[name]) for name in before)
    assert all(torch.equal(value, before[name]) for name, value in trainer.policy.named_parameters())


def test_with_the_average_every_rollout_is_rescored_by_it(monkeypatch) -> None:
    seen = recording_updates(monkeypatch)
    trainer = toy_env.make_toy_trainer(replay_rollouts=2, proximal_ewma=0.5, num_minibatches=2)
    n = trainer.driver.num_envs
    for _ in range(3):
        trainer.update()
    batch, cfg, _ = seen[2]
    assert batch.rollout.valid.shape[0] == 2 * n and cfg.num_minibatches == 4
    for i, raw in enumerate(trainer.replay.held):  # update 2's rollout, then update 3's: as collected
        rows = slice(i * n, (i + 1) * n)
        assert torch.equal(batch.rollout.obs[rows], raw.rollout.obs)
        with torch.no_grad(), trainer.replay.average.swapped_in():
            _, valid, ev = replay_rows(trainer.policy, batch.rollout, torch.arange(i * n, (i + 1) * n))
        torch.testing.assert_close(batch.rollout.log_probs[rows][valid], ev.log_prob[valid])
        expected = raw.advantages * (ev.log_prob - raw.rollout.log_probs).exp().clamp(max=1.0)
        torch.testing.assert_close(batch.advantages[rows][valid], expected[valid])
    with torch.no_grad():
        _, valid, now = replay_rows(trainer.policy, batch.rollout, torch.arange(n, 2 * n))
    assert not torch.equal(batch.rollout.log_probs[n:][valid], now.log_prob[valid])  # not the current policy's


def test_replay_rollouts_must_be_a_positive_count() -> None:
    with pytest.raises(ValueError, match="replay_rollouts"):
        AgentConfig(replay_rollouts=0)


@pytest.mark.parametrize("decay", [1.0, -0.1, float("nan")])
def test_proximal_ewma_must_be_in_the_half_open_unit_interval(decay: float) -> None:
    with pytest.raises(ValueError, match="proximal_ewma"):
        AgentConfig(proximal_ewma=decay)
