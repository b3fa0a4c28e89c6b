"""The rollout loop under the three autoreset modes, bootstrapping, masks and the normaliser order."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
import toy_env
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)

from esper_agent.buffer import Rollout
from esper_agent.config import AgentConfig
from esper_agent.envs import VectorEnvDriver, read_info
from esper_agent.trainer import Trainer
from esper_env.spaces import Op

MODES = ("NextStep", "SameStep", "Disabled")
LENGTH = 4  # toy episode length


make_trainer = toy_env.make_toy_trainer


def collect(trainer: Trainer, seed: int = 7) -> tuple[Rollout, object]:
    return trainer.collector.collect(seed, trainer.sample_generator)


def test_same_step_and_disabled_give_identical_rollouts() -> None:
    """Both modes deliver the same transitions (different plumbing for final observations and resets)."""
    same, same_stats = collect(make_trainer("SameStep", bootstrap_truncation=True))
    disabled, disabled_stats = collect(make_trainer("Disabled", bootstrap_truncation=True))
    for name, a, b in zip(Rollout._fields, same, disabled, strict=True):
        if name == "initial_state":
            continue
        assert np.array_equal(a, b) if name == "resets_inside" else torch.equal(a, b), name
    assert same.terminated.any() and same.truncated.any()  # the comparison covered both kinds of ending
    assert [e.episode_return for e in same_stats.episodes] == [e.episode_return for e in disabled_stats.episodes]


@pytest.mark.parametrize("mode", MODES)
def test_stored_transitions_follow_the_env_and_never_include_a_reset_step(mode: str) -> None:
    """Within a row, consecutive stored steps of one episode advance the env clock by exactly one step, every
    episode start shows t=0 and follows a finished episode: a stored NEXT_STEP reset transition (action ignored,
    reward 0, the terminal observation) would break one of these."""
    rollout, _ = collect(make_trainer(mode))
    clock = np.rint((rollout.obs[..., -2].numpy() + 1) * LENGTH / 2).astype(int)  # t of each stored obs
    valid, starts = rollout.valid.numpy(), rollout.episode_start.numpy()
    done = (rollout.terminated | rollout.truncated).numpy()
    for i in range(valid.shape[0]):
        for t in range(int(valid[i].sum())):
            if starts[i, t]:
                assert clock[i, t] == 0
                assert t == 0 or done[i, t - 1]
            else:
                assert clock[i, t] == clock[i, t - 1] + 1 and not done[i, t - 1]
            assert clock[i, t] < LENGTH  # a terminal observation (t = LENGTH) is never acted on and stored
    if mode == "NextStep":
        assert not valid.all()  # terminations happened, and their reset steps were left out
    assert rollout.truncated.any()


@pytest.mark.parametrize("mode", MODES)
def test_truncation_bootstraps_from_the_final_observation(mode: str) -> None:
    """V(terminal obs) from the state that took the episode's last action, computed here independently."""
    trainer = make_trainer(mode, bootstrap_truncation=True)
    rollout, _ = collect(trainer)
    policy = trainer.policy
    with torch.no_grad():
        state, checked = rollout.initial_state, 0
        for t in range(rollout.obs.shape[1]):
            _, state = policy.core_step(rollout.obs[:, t], state, rollout.episode_start[:, t])
            rows = (rollout.truncated[:, t] & ~rollout.terminated[:, t]).nonzero().flatten()
            if len(rows) == 0:
                continue
            final = rollout.obs[rows, t].clone()
            final[:, -2], final[:, -1] = 1.0, 0.0  # the toy's terminal observation after the last step
            sub = state._replace(h=state.h[rows], c=state.c[rows])
            want = policy.predict_value(final, sub, torch.zeros(len(rows), dtype=torch.bool))
            assert torch.allclose(rollout.bootstrap_values[rows, t], want, atol=1e-5)
            checked += len(rows)
    assert checked > 0
    assert (rollout.bootstrap_values[~rollout.truncated] == 0).all()


def test_rollouts_never_execute_a_masked_action() -> None:
    trainer = make_trainer("NextStep", num_envs=8, steps=24)
    _, stats = collect(trainer)
    assert stats.invalid_reported > 0 and stats.invalid == 0
    assert stats.op_counts.sum() == stats.transitions


def test_normalisers_frozen_within_a_rollout_and_updated_once_after_it() -> None:
    trainer = make_trainer("SameStep", normalize_obs=True)
    norm, scaler = trainer.obs_norm, trainer.reward_scaler
    norm.stats.update(np.random.default_rng(0).normal(size=(10, trainer.driver.obs_dim)))  # non-trivial stats
    before = (norm.stats.mean.copy(), norm.stats.var.copy(), norm.stats.count, scaler.stats.count)
    seen = []
    original = norm.normalize

    def spy(obs: np.ndarray) -> np.ndarray:
        seen.append((norm.stats.mean.copy(), norm.stats.count, scaler.stats.count))
        return original(obs)

    norm.normalize = spy  # type: ignore[method-assign]
    rollout, stats = collect(trainer)
    assert all(np.array_equal(m, before[0]) and c == before[2] and r == before[3] for m, c, r in seen)
    assert norm.stats.count == before[2] + stats.transitions  # one fold-in of every stored observation
    assert scaler.stats.count == before[3] + stats.transitions
    # The stored observations are the ones normalised with the pre-rollout statistics: the reset observation
    # has t = 0 (feature -2 is -1) and is not the last step (feature -1 is 0).
    first = rollout.obs[:, 0, -2:].numpy()
    raw = np.array([-1.0, 0.0])
    want = np.clip((raw - before[0][-2:]) / np.sqrt(before[1][-2:] + 1e-8), -10, 10)
    assert np.allclose(first, np.broadcast_to(want, first.shape), atol=1e-6)


def test_mask_validation_names_the_sub_env_and_head() -> None:
    driver = VectorEnvDriver(gym.make_vec(toy_env.ENV_ID, num_envs=2))
    _, info = driver.envs.reset(seed=0)
    bad = {k: v.copy() for k, v in info.items()}
    bad["op_slot_mask"][1] = False
    with pytest.raises(ValueError, match="sub-env 1: the masks allow no op"):
        driver.masks_from_info(bad)
    bad = {k: v.copy() for k, v in info.items()}
    bad["op_slot_mask"][0, Op.GERMINATE] = True
    bad["action_mask"][0, Op.GERMINATE] = True
    bad["action_mask"][0, 5 + 3 : 5 + 3 + 7] = False
    with pytest.raises(ValueError, match="sub-env 0: action_mask allows no blueprint"):
        driver.masks_from_info(bad)
    with pytest.raises(ValueError, match="shape"):
        driver.masks_from_info({"action_mask": np.ones((2, 3), bool)})


def test_read_info_is_defensive() -> None:
    values, present = read_info({"x": np.array([1.0, 2.0]), "_x": np.array([True, False])}, "x", 2)
    assert values.tolist() == [1.0, 0.0] and present.tolist() == [True, False]
    assert not read_info({}, "x", 2)[1].any()
    assert not read_info({"x": np.array([None, "a"], dtype=object)}, "x", 2)[1].any()
    assert not read_info({"x": np.ones(3)}, "x", 2)[1].any()


def test_gamma_contract_is_enforced() -> None:
    shaped = gym.make_vec(toy_env.ENV_ID, num_envs=2, pbrs_weight=0.5, pbrs_gamma=0.99)
    with pytest.raises(ValueError, match="pbrs_gamma=0.99"):
        Trainer(shaped, AgentConfig(gamma=0.995, num_minibatches=1))
    Trainer(shaped, AgentConfig(gamma=0.99, num_minibatches=1))  # same gamma: fine
    unshaped = gym.make_vec(toy_env.ENV_ID, num_envs=2, pbrs_weight=0.0, pbrs_gamma=0.99)
    Trainer(unshaped, AgentConfig(gamma=0.995, num_minibatches=1))  # no shaping: gamma is free


def test_without_truncation_bootstrap_a_truncated_return_ends_like_a_terminated_one() -> None:
    """``bootstrap_truncation=False`` (the default): no V(final obs) is stored, so the advantage of a truncated
    episode's last step is its reward minus its value, exactly as on termination."""
    from esper_agent.buffer import compute_gae

    rollout, _ = collect(make_trainer("NextStep", bootstrap_truncation=True))
    assert (rollout.bootstrap_values[rollout.truncated] != 0).any()  # switched on, it does bootstrap here
    cut = make_trainer("NextStep")
    rollout, _ = collect(cut)
    assert rollout.truncated.any() and (rollout.bootstrap_values == 0).all()
    advantages = compute_gae(rollout, rollout.rewards, cut.config.gamma, cut.config.gae_lambda).advantages
    ends = rollout.truncated & ~rollout.terminated
    assert torch.allclose(advantages[ends], rollout.rewards[ends] - rollout.values[ends])


def test_trainer_builds_its_policy_with_the_configured_op_priors() -> None:
    bias = make_trainer("NextStep", wait_prior=1.5, prune_prior=0.5).policy.heads[0][-1].bias  # head 0: op
    assert bias[Op.WAIT].item() == 1.5 and bias[Op.PRUNE].item() == -0.5
