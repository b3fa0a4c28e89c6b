"""The trainer's loop: with its extensions off, an update is exactly plain PPO's collect -> advantages -> update."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
import toy_env
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)

from esper_agent.buffer import compute_gae, subtract_group_baseline
from esper_agent.collect import grouped_reset_seeds, rank_reset_seed
from esper_agent.ppo import TrainBatch, ppo_update


def test_with_the_extensions_off_an_update_is_plain_ppo() -> None:
    """Two updates of the trainer and two of the loop written out by hand from the same components: bit-identical
    networks, so nothing the extensions hook into changes plain PPO."""
    trainer = toy_env.make_toy_trainer(anneal_lr=True)
    manual = toy_env.make_toy_trainer(anneal_lr=True)
    trainer.total_updates = manual.total_updates = 4  # the annealed learning rate stays above 0
    cfg = manual.config
    for update in range(2):
        trainer.update()
        seed = rank_reset_seed(manual.seed, update, 0, manual.driver.num_envs)
        rollout, _ = manual.collector.collect(seed, manual.sample_generator)
        advantages = compute_gae(rollout, manual.reward_scaler.scale_rewards(rollout.rewards), cfg.gamma,
                                 cfg.gae_lambda)
        for group in manual.optimizer.param_groups:
            group["lr"] = cfg.learning_rate * (1 - update / manual.total_updates)
        ppo_update(manual.policy, manual.optimizer, TrainBatch(rollout, advantages.advantages, advantages.returns),
                   cfg, manual.minibatch_generator, manual.guard)
        manual.update_index += 1
    assert trainer.selection is None and trainer.reference is None
    for name, value in trainer.policy.state_dict().items():
        assert torch.equal(value, manual.policy.state_dict()[name]), name
    assert not all(torch.equal(value, toy_env.make_toy_trainer().policy.state_dict()[name])
                   for name, value in trainer.policy.state_dict().items())  # it did train


def test_seed_groups_share_a_reset_seed_and_a_baseline() -> None:
    """With seed_group_size 2 the trainer resets sub-envs in pairs of one seed (same first observation: the toy's
    cue) and subtracts the pair's leave-one-out baseline; written out by hand from the components, bit-identical."""
    trainer = toy_env.make_toy_trainer(seed_group_size=2)
    manual = toy_env.make_toy_trainer(seed_group_size=2)
    cfg, n = manual.config, manual.driver.num_envs
    trainer.update()
    seeds = grouped_reset_seeds(rank_reset_seed(manual.seed, 0, 0, n), n, 2)
    assert seeds == [seeds[0] + i // 2 for i in range(n)]
    rollout, _ = manual.collector.collect(seeds, manual.sample_generator)
    first = rollout.obs[:, 0]
    assert torch.equal(first[0::2], first[1::2]) and not torch.equal(first[0], first[2])
    advantages = subtract_group_baseline(
        compute_gae(rollout, manual.reward_scaler.scale_rewards(rollout.rewards), cfg.gamma, cfg.gae_lambda),
        rollout, 2)
    ppo_update(manual.policy, manual.optimizer, TrainBatch(rollout, advantages.advantages, advantages.returns),
               cfg, manual.minibatch_generator, manual.guard)
    for name, value in trainer.policy.state_dict().items():
        assert torch.equal(value, manual.policy.state_dict()[name]), name


def test_seed_groups_must_divide_the_sub_envs() -> None:
    with pytest.raises(ValueError, match="seed_group_size=4 must be >= 1 and divide num_envs=6"):
        toy_env.make_toy_trainer(seed_group_size=4)
    with pytest.raises(ValueError, match="seed_group_size=4 must be >= 1 and divide num_envs=6"):
        grouped_reset_seeds(0, 6, 4)
    assert grouped_reset_seeds(10, 6, 1) == 10  # off: the vector env seeds sub-env i with 10 + i


def test_an_esper_seed_group_starts_alike(tiny: dict) -> None:
    """After one WAIT step (the reset observation is the same for every seed), the sub-envs of a group match
    and the groups differ: host weights and data order come from the reset seed."""
    envs = gym.make_vec("Esper-Synthetic-v0", num_envs=4, **tiny)
    envs.reset(seed=grouped_reset_seeds(11, 4, 2))
    obs = envs.step(np.zeros((4, 5), np.int64))[0]
    envs.close()
    np.testing.assert_array_equal(obs[0], obs[1])
    np.testing.assert_array_equal(obs[2], obs[3])
    assert not np.array_equal(obs[0], obs[2])
