"""Imitation before PPO: scoring a teacher's actions, the imitation update, and the trainer's switch to PPO."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)
from test_distributions import NUM_SLOTS, RELEVANCE, SIZES, random_masks

from esper_agent.config import AgentConfig
from esper_agent.distributions import evaluate_factored, sample_factored
from esper_agent.heuristic import HeuristicActor
from esper_agent.imitate import imitation_update
from esper_agent.ppo import NonFiniteGuard
from esper_agent.trainer import Trainer
from esper_env.spaces import Head, Op

SMALL = {"max_epochs": 6, "device": "cpu", "synthetic_train_size": 256, "synthetic_val_size": 64,
         "min_prune_age": 0}


def test_a_given_action_is_scored_not_sampled() -> None:
    g = torch.Generator().manual_seed(0)
    masks = random_masks(64, g)
    logits = [torch.randn(64, n, generator=g) for n in SIZES]
    teacher = sample_factored(logits, masks, RELEVANCE, g)  # valid actions, from other logits
    other = [torch.randn(64, n, generator=g) for n in SIZES]
    scored = sample_factored(other, masks, RELEVANCE, g, given=teacher.action)
    assert torch.equal(scored.action, teacher.action)
    assert torch.equal(scored.used_mask, teacher.used_mask)  # the masks depend on the action, not the logits
    replay = evaluate_factored(other, scored.used_mask, scored.action, RELEVANCE)
    torch.testing.assert_close(scored.log_prob, replay.log_prob)


def test_a_given_value_outside_its_head_is_refused_before_it_indexes_anything() -> None:
    g = torch.Generator().manual_seed(1)
    masks = random_masks(4, g)
    given = torch.zeros(4, len(SIZES), dtype=torch.long)
    given[1, Head.BLUEPRINT] = SIZES[Head.BLUEPRINT]
    with pytest.raises(ValueError, match=r"one value per head in \[0, size\)"):
        sample_factored([torch.zeros(4, n) for n in SIZES], masks, RELEVANCE, g, given=given)


def test_a_given_action_the_masks_rule_out_is_refused() -> None:
    g = torch.Generator().manual_seed(1)
    masks = random_masks(4, g)
    masks.op_slot[:, Op.PRUNE] = False
    given = torch.zeros(4, len(SIZES), dtype=torch.long)
    given[2, Head.OP], given[2, Head.SLOT] = Op.PRUNE, NUM_SLOTS - 1
    logits = [torch.zeros(4, n) for n in SIZES]
    with pytest.raises(ValueError, match="row 2 has head OP = 3"):
        sample_factored(logits, masks, RELEVANCE, g, given=given)


class RecordingTeacher(HeuristicActor):
    """The heuristic, keeping every action it returned."""

    def __init__(self, num_slots: int) -> None:
        super().__init__(num_slots)
        self.actions: list[np.ndarray] = []

    def act(self, obs, masks, episode_start) -> np.ndarray:
        action = super().act(obs, masks, episode_start)
        self.actions.append(action)
        return action


def trainer(imitation_updates: int, **config) -> Trainer:
    envs = gym.make_vec("Esper-Synthetic-v0", num_envs=2, **SMALL)
    cfg = AgentConfig(rollout_steps=6, hidden_size=16, num_minibatches=2, imitation_updates=imitation_updates,
                      **config)
    return Trainer(envs, cfg, seed=0, total_updates=imitation_updates + 1)


def test_a_demonstration_stores_the_teachers_actions() -> None:
    t = trainer(1)
    teacher = RecordingTeacher(t.driver.num_slots)
    rollout, stats = t.collector.collect(3, t.sample_generator, teacher)
    assert rollout.valid.all() and len(stats.episodes) == 2
    assert np.array_equal(rollout.actions.numpy(), np.stack(teacher.actions, 1))
    assert (rollout.actions[..., Head.OP] != Op.WAIT).any()  # the heuristic did something to imitate


def test_imitation_makes_the_teachers_actions_likelier() -> None:
    t = trainer(1, imitation_epochs=5, learning_rate=3e-3)
    rollout, _ = t.collector.collect(3, t.sample_generator, HeuristicActor(t.driver.num_slots))
    rollout = type(rollout)(*(x.clone() if isinstance(x, torch.Tensor) else x for x in rollout))

    def mean_log_prob() -> float:
        with torch.no_grad():
            ev = t.policy.sequence(rollout.obs, rollout.episode_start, rollout.initial_state, rollout.actions,
                                   rollout.used_masks)
        return float(ev.log_prob[rollout.valid].mean())

    before = mean_log_prob()
    stats = imitation_update(t.policy, t.optimizer, rollout, torch.zeros_like(rollout.values), t.config,
                             torch.Generator().manual_seed(0), NonFiniteGuard(3))
    assert mean_log_prob() > before + 0.1
    assert math.isfinite(stats["imitation/nll"]) and 0 < stats["imitation/action_prob"] <= 1


def test_the_trainer_imitates_first_then_runs_ppo() -> None:
    t = trainer(2)
    rows = list(t.train())
    assert [r["imitation/active"] for r in rows] == [1.0, 1.0, 0.0]
    assert all(math.isfinite(r["imitation/nll"]) and math.isnan(r["ppo/kl"]) for r in rows[:2])
    assert math.isnan(rows[2]["imitation/nll"]) and math.isfinite(rows[2]["ppo/kl"])
    assert [set(r) for r in rows[1:]] == [set(rows[0])] * 2  # one key set: metrics.csv keeps one header
    assert t.env_steps == 3 * 2 * 6  # demonstrations count as env steps like any rollout
    assert math.isnan(rows[0]["ppo/steps_applied"]) and rows[0]["ppo/nonfinite_steps"] == 0.0
    assert not any(a.startswith("entropy_collapse") for r in rows[:2] for a in r["anomalies"])  # the aim there


def test_imitation_settings_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError, match="imitation_updates=-1 is out of range; expected an integer >= 0"):
        AgentConfig(imitation_updates=-1)
    with pytest.raises(ValueError, match="imitation_epochs=0 is out of range"):
        AgentConfig(imitation_epochs=0)


def test_the_trainer_refuses_imitation_where_the_teacher_cannot_run() -> None:
    import toy_env

    from esper_agent.distributed import SingleProcess

    class TwoRanks(SingleProcess):
        world_size = 2

    envs = gym.make_vec("Esper-Synthetic-v0", num_envs=2, **SMALL)
    with pytest.raises(ValueError, match="imitation_updates=1 is for one process; this run has 2 ranks"):
        Trainer(envs, AgentConfig(rollout_steps=6, hidden_size=16, imitation_updates=1), ranks=TwoRanks())
    toy = gym.make_vec(toy_env.ENV_ID, num_envs=2)
    with pytest.raises(ValueError, match="needs Esper's observations"):
        Trainer(toy, AgentConfig(hidden_size=16, imitation_updates=1))


def test_ppo_starts_from_fresh_adam_moments(monkeypatch: pytest.MonkeyPatch) -> None:
    from esper_agent import trainer as trainer_module

    t, seen = trainer(1), []
    real = trainer_module.ppo_update

    def spy(policy, optimizer, *args):
        seen.append(len(optimizer.state))  # parameters with Adam moments when PPO starts its update
        return real(policy, optimizer, *args)

    monkeypatch.setattr(trainer_module, "ppo_update", spy)
    list(t.train(total_updates=3))  # one imitation update, then two PPO updates
    assert seen[0] == 0 and seen[1] == len(list(t.policy.parameters()))


def test_the_reference_is_the_policy_imitation_left_and_checkpoints_keep_it() -> None:
    t = trainer(1, reference_kl_coef=0.1)
    t.update()
    imitated = {k: v.clone() for k, v in t.policy.state_dict().items()}
    assert t.reference is None  # made when PPO starts
    row = t.update()
    assert row["loss/reference_kl"] > 0  # PPO moved away from it within its first update
    for name, value in t.reference.state_dict().items():
        assert torch.equal(value, imitated[name])
    assert not any(p.requires_grad for p in t.reference.parameters())
    resumed = trainer(1, reference_kl_coef=0.1)
    resumed.load_state_dict(t.state_dict())
    for name, value in resumed.reference.state_dict().items():
        assert torch.equal(value, imitated[name])
    plain = trainer(1)
    list(plain.train())
    assert plain.reference is None and plain.state_dict()["reference"] is None


def test_the_reference_weight_falls_to_zero_over_its_ppo_updates() -> None:
    t = trainer(2, reference_kl_coef=0.4, reference_kl_updates=2)
    t.total_updates = 5
    rows = list(t.train())
    weights = [r["ppo/reference_kl_weight"] for r in rows]
    assert all(math.isnan(w) for w in weights[:2]) and weights[2:] == [0.4, 0.2, 0.0]
    assert rows[2]["loss/reference_kl"] > 0 and rows[3]["loss/reference_kl"] > 0
    assert rows[4]["loss/reference_kl"] == 0.0  # weight 0: the term is not computed
    assert [set(r) for r in rows] == [set(rows[0])] * 5
    with pytest.raises(ValueError, match="reference_kl_updates=4 is out of range; expected 0 while reference_kl"):
        AgentConfig(reference_kl_updates=4)


def test_demonstrations_keep_one_seed_per_sub_env_when_ppo_groups_seeds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The heuristic plays a seed the same way every time: a seed group would demonstrate one episode twice."""
    t = trainer(1, seed_group_size=2)
    seeds = []
    collect = t.collector.collect
    monkeypatch.setattr(t.collector, "collect", lambda seed, *rest: seeds.append(seed) or collect(seed, *rest))
    t.update()  # imitation
    t.update()  # PPO
    assert isinstance(seeds[0], int) and seeds[1] == [seeds[1][0]] * 2
