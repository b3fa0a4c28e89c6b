"""The training loop: collect a rollout, scale rewards, GAE, PPO update, metrics. No file I/O here.

:class:`Trainer` owns everything that must survive an interruption (network, optimizer, normalisers, RNG
states, counters) and exposes it as :meth:`Trainer.state_dict` for checkpoints; with the env reseeded from
``(seed, update)`` at every rollout, loading that state continues a run exactly (on CPU).

Under torchrun (``ranks``, see ``esper_agent.distributed``) every rank runs this same loop on its own sub-envs:
rank ``r`` resets its envs as sub-envs ``r * num_envs ...`` of one big vector env would be, samples actions from
its own generator, and joins the others in the normalisers' merge and the PPO update, after which every rank
holds the same network, optimizer and normalisers; the metrics are those of all ranks together.
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import torch

from esper_agent.anomalies import detect_anomalies
from esper_agent.buffer import Advantages, Rollout, RolloutStorage, compute_gae
from esper_agent.collect import Collector, merge_rollout_stats, rank_reset_seed
from esper_agent.config import AgentConfig
from esper_agent.contracts import check_gamma_contract, check_imitation_possible, episode_length
from esper_agent.distributed import SINGLE, SingleProcess, sample_seed, warn_main
from esper_agent.envs import VectorEnvDriver
from esper_agent.heuristic import HeuristicActor
from esper_agent.imitate import IMITATION_STATS, imitation_update
from esper_agent.normalize import ObservationNormalizer, RewardScaler
from esper_agent.policy import RecurrentPolicy
from esper_agent.ppo import NonFiniteGuard, Reference, TrainBatch, empty_ppo_stats, ppo_update
from esper_agent.selection import BestPolicy, kept_policy, snapshot
from esper_agent.statistics import rollout_statistics
from esper_agent.telemetry import rollout_metrics


class Trainer:
    """Factored recurrent PPO on a Gymnasium vector env with Esper's action space and masks; the first
    ``config.imitation_updates`` updates imitate the heuristic instead (:mod:`esper_agent.imitate`)."""

    def __init__(self, envs: gym.vector.VectorEnv, config: AgentConfig, *, device: str | torch.device = "cpu",
                 seed: int = 0, total_updates: int = 100, ranks: SingleProcess = SINGLE) -> None:
        check_gamma_contract(envs, config.gamma)
        self.driver = VectorEnvDriver(envs)
        if config.num_minibatches > self.driver.num_envs:
            raise ValueError(f"num_minibatches={config.num_minibatches} exceeds num_envs={self.driver.num_envs}: "
                             "a minibatch holds whole env sequences")
        length = episode_length(envs)
        if length is not None and config.rollout_steps < length:
            warnings.warn(f"rollout_steps={config.rollout_steps} < the env's episode length {length}: every rollout "
                          "restarts the envs, so the agent never sees the end of an episode", stacklevel=2)
        if config.imitation_updates:
            check_imitation_possible(config.imitation_updates, self.driver, ranks)
        self.envs, self.config, self.seed, self.total_updates = envs, config, seed, total_updates
        self.device, self.ranks = torch.device(device), ranks
        with torch.random.fork_rng(devices=[]):  # seeded init without touching the caller's global RNG
            torch.manual_seed(seed)
            self.policy = RecurrentPolicy.from_config(self.driver.obs_dim, self.driver.num_slots, config)
        self.policy.to(self.device)
        ranks.broadcast_module(self.policy)  # the same seed gave the same weights; this makes it a fact
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.learning_rate, eps=config.adam_eps)
        self.obs_norm = ObservationNormalizer(self.driver.obs_dim, config.obs_clip, config.normalize_obs)
        self.reward_scaler = RewardScaler(self.driver.num_envs, config.gamma, config.reward_clip,
                                          config.normalize_reward)
        storage = RolloutStorage(self.driver.num_envs, config.rollout_steps, self.driver.obs_dim,
                                 self.driver.head_sizes, config.hidden_size, self.device)
        self.collector = Collector(self.driver, self.policy, self.obs_norm, self.reward_scaler, storage, ranks,
                                   config.bootstrap_truncation)
        self.sample_generator = torch.Generator(self.device).manual_seed(sample_seed(seed, ranks.rank))
        self.minibatch_generator = torch.Generator("cpu").manual_seed(seed + 1)
        self.guard = NonFiniteGuard(config.max_nonfinite_steps)
        self.selection = BestPolicy(config.select_best_window) if config.select_best_window else None
        self.reference: RecurrentPolicy | None = None  # with reference_kl_coef: the policy PPO started from
        self.update_index, self.env_steps = 0, 0

    def learning_rate(self) -> float:
        if not self.config.anneal_lr:
            return self.config.learning_rate
        return self.config.learning_rate * max(0.0, 1.0 - self.update_index / max(self.total_updates, 1))

    def train(self, total_updates: int | None = None) -> Iterator[dict[str, Any]]:
        """Run updates until ``total_updates`` are done, yielding each update's metrics."""
        if total_updates is not None:
            self.total_updates = total_updates
        while self.update_index < self.total_updates:
            yield self.update()

    def imitating(self) -> bool:
        """Whether the next update imitates the heuristic (the first ``imitation_updates``) rather than PPO."""
        return self.update_index < self.config.imitation_updates

    def update(self) -> dict[str, Any]:
        start = time.perf_counter()
        imitating = self.imitating()
        seed = rank_reset_seed(self.seed, self.update_index, self.ranks.rank, self.driver.num_envs)
        teacher = HeuristicActor(self.driver.num_slots) if imitating else None
        collector = snapshot(self.policy, self.obs_norm) if self.selection is not None and not imitating else None
        rollout, local_stats = self.collector.collect(seed, self.sample_generator, teacher)
        collected = time.perf_counter()
        # Every rank's episodes and counts; the rollout took as long as its slowest rank.
        parts = self.ranks.gather_objects((local_stats, collected - start))
        stats, rollout_s = merge_rollout_stats([p[0] for p in parts]), max(p[1] for p in parts)
        episode_stats = rollout_metrics(stats, rollout_s)
        if collector is not None:
            self.selection.observe(episode_stats["episode/return_mean"], self.update_index + 1, collector)
        # Imitation fits the critic to lambda-1 returns (see esper_agent.imitate); the value statistics below then
        # describe the target the critic is fitted to in either kind of update.
        lam = 1.0 if imitating else self.config.gae_lambda
        advantages = compute_gae(rollout, self.reward_scaler.scale_rewards(rollout.rewards), self.config.gamma, lam)
        lr = self.learning_rate()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        update_stats = self._learn(rollout, advantages, imitating)
        self.update_index += 1
        self.env_steps += stats.transitions
        metrics: dict[str, Any] = {"update": self.update_index, "env_steps": self.env_steps, "ppo/lr": lr,
                                   "imitation/active": float(imitating),
                                   "normalizer/reward_scale": self.reward_scaler.scale}
        metrics |= update_stats | rollout_statistics(rollout, advantages, self.ranks) | episode_stats
        if self.selection is not None:
            metrics |= self.selection.metrics()
        metrics["time/update_s"] = time.perf_counter() - collected
        metrics["anomalies"] = detect_anomalies(metrics, self.config)
        return metrics

    def selected_policy(self) -> tuple[RecurrentPolicy, ObservationNormalizer]:
        """The policy training hands out: with ``select_best_window``, copies of the one kept by
        :mod:`esper_agent.selection`; else, or if no window has finished yet, the trainer's own policy and
        normaliser (not copies)."""
        if self.selection is None or self.selection.best is None:
            return self.policy, self.obs_norm
        return kept_policy(self.selection.best, self.policy, self.obs_norm, self.device)

    def _learn(self, rollout: Rollout, advantages: Advantages, imitating: bool) -> dict[str, float]:
        """The learning half of an update: imitation of the rollout's (heuristic's) actions, or PPO. Both report
        the same keys; each leaves the other's statistics NaN."""
        if imitating:
            return empty_ppo_stats(list(self.policy.parameter_groups())) | {"ppo/reference_kl_weight": math.nan} | (
                imitation_update(
                    self.policy, self.optimizer, rollout, advantages.returns, self.config, self.minibatch_generator,
                    self.guard))
        if self.config.imitation_updates > 0 and self.update_index == self.config.imitation_updates:
            self.optimizer.state.clear()  # Adam's moments were those of the imitation loss
        if self.config.reference_kl_coef > 0 and self.reference is None:
            self.reference = self._frozen_copy()  # the first PPO update: the policy PPO starts from
        weight = self.reference_weight()
        reference = Reference(self.reference, weight) if self.reference is not None and weight > 0 else None
        batch = TrainBatch(rollout, advantages.advantages, advantages.returns)
        return dict.fromkeys(IMITATION_STATS, math.nan) | {"ppo/reference_kl_weight": weight} | ppo_update(
            self.policy, self.optimizer, batch, self.config, self.minibatch_generator, self.guard, self.ranks,
            reference)

    def reference_weight(self) -> float:
        """The weight of the KL term to the reference in this PPO update: ``reference_kl_coef``, falling linearly
        to 0 over ``reference_kl_updates`` PPO updates when that is set."""
        cfg = self.config
        if cfg.reference_kl_updates == 0:
            return cfg.reference_kl_coef
        done = max(0, self.update_index - cfg.imitation_updates)  # PPO updates before this one
        return cfg.reference_kl_coef * max(0.0, 1.0 - done / cfg.reference_kl_updates)

    def _frozen_copy(self) -> RecurrentPolicy:
        """A copy of the policy's network, without gradients."""
        return copy.deepcopy(self.policy).requires_grad_(False).eval()

    def _shape(self) -> dict[str, int]:
        return {"obs_dim": self.driver.obs_dim, "num_slots": self.driver.num_slots,
                "num_envs": self.driver.num_envs, "hidden_size": self.config.hidden_size}

    def state_dict(self) -> dict[str, Any]:
        """Everything a checkpoint holds. Under torchrun every rank must call it (it gathers each rank's
        action-sampling RNG state); the rest is the same on every rank."""
        sample_states = self.ranks.gather_objects(self.sample_generator.get_state())
        return {
            "config": self.config.to_dict(),
            "shape": self._shape(),
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "normalizers": {"obs": self.obs_norm.state_dict(), "reward": self.reward_scaler.state_dict()},
            "rng": {"sample": sample_states[0], "sample_by_rank": sample_states, "sample_device": self.device.type,
                    "minibatch": self.minibatch_generator.get_state()},
            "counters": {"update": self.update_index, "env_steps": self.env_steps, "seed": self.seed,
                         "total_updates": self.total_updates, "nonfinite_streak": self.guard.streak,
                         "world_size": self.ranks.world_size},
            "selection": None if self.selection is None else self.selection.state_dict(),
            "reference": None if self.reference is None else self.reference.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`; the config and shapes must match this trainer's."""
        if AgentConfig.from_dict(state["config"]) != self.config:
            raise ValueError("the checkpoint's AgentConfig differs from this trainer's")
        mine = self._shape()
        if state["shape"] != mine:
            raise ValueError(f"checkpoint shapes {state['shape']} do not match this run's {mine}")
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.obs_norm.load_state_dict(state["normalizers"]["obs"])
        self.reward_scaler.load_state_dict(state["normalizers"]["reward"])
        self.minibatch_generator.set_state(state["rng"]["minibatch"])
        counters = state["counters"]
        self.update_index, self.env_steps = int(counters["update"]), int(counters["env_steps"])
        self.seed, self.guard.streak = int(counters["seed"]), int(counters["nonfinite_streak"])
        self._load_sample_state(state["rng"], int(counters.get("world_size", 1)))
        if self.selection is not None and state.get("selection") is not None:
            self.selection.load_state_dict(state["selection"])
        if state.get("reference") is not None:
            self.reference = self._frozen_copy()
            self.reference.load_state_dict(state["reference"])

    def _load_sample_state(self, rng: dict[str, Any], saved_world_size: int) -> None:
        """Each rank continues its own action-sampling stream; with another number of ranks than the checkpoint's,
        a rank the checkpoint did not have starts a fresh stream from (seed, rank, update)."""
        states = rng.get("sample_by_rank", [rng["sample"]])
        world_size = self.ranks.world_size
        if saved_world_size != world_size:
            fresh = f"; ranks {len(states)} to {world_size - 1} start fresh action-sampling streams" * (
                world_size > len(states))
            warn_main(self.ranks, f"the checkpoint was written by {saved_world_size} process(es), this run has "
                      f"{world_size}: the network, optimizer and normalisers continue{fresh}")
        if rng["sample_device"] != self.device.type:
            warn_main(self.ranks, f"checkpoint sampled actions on {rng['sample_device']}, this run on "
                      f"{self.device.type}: the action-sampling RNG restarts from the seed")
        elif self.ranks.rank < len(states):
            self.sample_generator.set_state(states[self.ranks.rank])
        else:
            self.sample_generator.manual_seed(sample_seed(self.seed, self.ranks.rank) + self.update_index)


__all__ = ["Trainer", "check_gamma_contract", "check_imitation_possible"]
