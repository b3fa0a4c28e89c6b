"""The trainer's loop: with its extensions off, an update is exactly plain PPO's collect -> advantages -> update."""

from __future__ import annotations

import torch
import toy_env
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)

from esper_agent.buffer import compute_gae
from esper_agent.collect import rank_reset_seed
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
