"""The training loop, in CleanRL's order: collect a rollout, compute advantages, update the policy, log. No file I/O.

One :meth:`Trainer.update` is

1. **collect**: reset the envs with a seed derived from ``(seed, update)`` and play ``rollout_steps`` steps
   (:mod:`esper_agent.collect`);
2. **advantages**: scale the rewards (:mod:`esper_agent.normalize`) and compute GAE (:mod:`esper_agent.buffer`);
3. **update**: set the learning rate, then the PPO update (:mod:`esper_agent.ppo`);
4. **log**: the update's metrics (:mod:`esper_agent.statistics`, :mod:`esper_agent.telemetry`) and the anomaly
   checks (:mod:`esper_agent.anomalies`).

Three options extend it at marked points, each one class of :mod:`esper_agent.extensions`: imitation (who acts in
step 1, lambda in step 2, and the update in step 3), the reference KL (a term in PPO's loss) and best-window
selection (a snapshot before step 1, a score after it). With them off the loop is plain PPO.

:class:`Trainer` owns everything that must survive an interruption (network, optimizer, normalisers, RNG
states, counters, the extensions' state) and exposes it as :meth:`Trainer.state_dict` for checkpoints; with the
env reseeded from ``(seed, update)`` at every rollout, loading that state continues a run exactly (on CPU).

Under torchrun (``ranks``, see ``esper_agent.distributed``) every rank runs this same loop on its own sub-envs:
rank ``r`` resets its envs as sub-envs ``r * num_envs ...`` of one big vector env would be, samples actions from
its own generator, and joins the others in the normalisers' merge and the PPO update, after which every rank
holds the same network, optimizer and normalisers; the metrics are those of all ranks together.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import torch

from esper_agent.anomalies import detect_anomalies
from esper_agent.buffer import Advantages, Rollout, RolloutStorage, compute_gae, subtract_group_baseline
from esper_agent.collect import Collector, RolloutStats, grouped_reset_seeds, merge_rollout_stats, rank_reset_seed
from esper_agent.config import AgentConfig
from esper_agent.contracts import check_gamma_contract, check_imitation_possible, episode_length
from esper_agent.distributed import SINGLE, SingleProcess, sample_seed, warn_main
from esper_agent.envs import VectorEnvDriver
from esper_agent.extensions import BestWindow, Imitation, ReferenceKL, Replay
from esper_agent.heuristic import HeuristicActor, env_host
from esper_agent.normalize import ObservationNormalizer, RewardScaler
from esper_agent.policy import RecurrentPolicy
from esper_agent.ppo import NonFiniteGuard, TrainBatch, ppo_update
from esper_agent.selection import BestPolicy
from esper_agent.statistics import rollout_statistics
from esper_agent.telemetry import rollout_metrics
from esper_env.blueprints import catalogue


def check_shapes(envs: gym.vector.VectorEnv, driver: VectorEnvDriver, config: AgentConfig) -> None:
    """Refuse minibatches that cannot hold whole env rows and seed groups that are not whole sub-envs; warn when
    a rollout cannot hold a whole episode."""
    if config.num_minibatches > driver.num_envs:
        raise ValueError(f"num_minibatches={config.num_minibatches} exceeds num_envs={driver.num_envs}: "
                         "a minibatch holds whole env sequences")
    grouped_reset_seeds(0, driver.num_envs, config.seed_group_size)  # refuses groups that do not divide num_envs
    length = episode_length(envs)
    if length is not None and config.rollout_steps < length:
        warnings.warn(f"rollout_steps={config.rollout_steps} < the env's episode length {length}: every rollout "
                      "restarts the envs, so the agent never sees the end of an episode", stacklevel=3)


class Trainer:
    """Factored recurrent PPO on a Gymnasium vector env with Esper's action space and masks, with the optional
    extensions of :mod:`esper_agent.extensions`."""

    def __init__(self, envs: gym.vector.VectorEnv, config: AgentConfig, *, device: str | torch.device = "cpu",
                 seed: int = 0, total_updates: int = 100, ranks: SingleProcess = SINGLE) -> None:
        check_gamma_contract(envs, config.gamma)
        self.driver = VectorEnvDriver(envs)
        self.blueprint_names = tuple(b.name for b in catalogue(env_host(envs)))  # the plant/ metrics' names
        check_shapes(envs, self.driver, config)
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
        self.imitation = Imitation(config, self.driver, ranks)
        self.reference_kl = ReferenceKL(config)
        self.best_window = BestWindow(config.select_best_window)
        self.replay = Replay(config)
        self.update_index, self.env_steps = 0, 0

    @property
    def selection(self) -> BestPolicy | None:
        """The best-window selection (None when ``select_best_window`` is 0)."""
        return self.best_window.selection

    @property
    def reference(self) -> RecurrentPolicy | None:
        """The frozen policy PPO started from (None before the first PPO update or when ``reference_kl_coef``
        is 0)."""
        return self.reference_kl.policy

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

    def update(self) -> dict[str, Any]:
        """One iteration: collect, advantages, update, log; returns the update's metrics."""
        imitating = self.imitation.active(self.update_index)
        candidate = self.best_window.candidate(self.policy, self.obs_norm, imitating)  # extension: selection

        # 1. collect
        teacher = self.imitation.teacher(self.update_index)  # extension: imitation (the heuristic acts)
        rollout, stats, rollout_s = self._collect(teacher)
        collected = time.perf_counter()
        episodes = rollout_metrics(stats, rollout_s, self.blueprint_names)
        self.best_window.observe(episodes["episode/return_mean"], self.update_index + 1, candidate)  # extension

        # 2. advantages
        rewards = self.reward_scaler.scale_rewards(rollout.rewards)
        lam = self.imitation.gae_lambda(self.update_index)  # extension: imitation fits lambda-1 returns
        advantages = compute_gae(rollout, rewards, self.config.gamma, lam)
        if not imitating:  # imitation fits the critic to returns only; the baseline is for the policy gradient
            advantages = subtract_group_baseline(advantages, rollout, self.config.seed_group_size)

        # 3. update
        lr = self.learning_rate()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        if imitating:  # extension: imitation replaces PPO's update
            learned = self.imitation.learn(self.policy, self.optimizer, rollout, advantages.returns,
                                           self.minibatch_generator, self.guard)
        else:
            learned = self._ppo(rollout, advantages)
        self.update_index += 1
        self.env_steps += stats.transitions

        # 4. log
        metrics: dict[str, Any] = {"update": self.update_index, "env_steps": self.env_steps, "ppo/lr": lr,
                                   "imitation/active": float(imitating),
                                   "normalizer/reward_scale": self.reward_scaler.scale}
        metrics |= learned | rollout_statistics(rollout, advantages, self.ranks) | episodes
        metrics |= self.best_window.metrics()  # extension: selection (no keys when off)
        metrics |= self.replay.metrics()  # extension: replay (no keys when off)
        metrics["time/update_s"] = time.perf_counter() - collected
        metrics["anomalies"] = detect_anomalies(metrics, self.config)
        return metrics

    def _collect(self, teacher: HeuristicActor | None) -> tuple[Rollout, RolloutStats, float]:
        """This update's rollout (the teacher acts if one is given), every rank's statistics of it, and the
        seconds it took the slowest rank."""
        start = time.perf_counter()
        group = 1 if teacher is not None else self.config.seed_group_size  # the heuristic would play each seed alike
        seed = grouped_reset_seeds(rank_reset_seed(self.seed, self.update_index, self.ranks.rank, self.driver.num_envs),
                                   self.driver.num_envs, group)
        rollout, local_stats = self.collector.collect(seed, self.sample_generator, teacher)
        parts = self.ranks.gather_objects((local_stats, time.perf_counter() - start))
        return rollout, merge_rollout_stats([p[0] for p in parts]), max(p[1] for p in parts)

    def _ppo(self, rollout: Rollout, advantages: Advantages) -> dict[str, float]:
        """PPO's update, with the reference KL term when that extension is on; the imitation statistics are NaN."""
        self.imitation.hand_over(self.optimizer, self.update_index)  # extension: fresh Adam moments after imitation
        reference = self.reference_kl.for_update(self.policy, self.update_index)  # extension: reference KL
        batch, config = self.replay.batch(self.policy, TrainBatch(rollout, advantages.advantages, advantages.returns),
                                          self.config)  # extension: replay (as given when off)
        stats = ppo_update(self.policy, self.optimizer, batch, config, self.minibatch_generator, self.guard,
                           self.ranks, reference)
        return self.imitation.absent_stats() | {"ppo/reference_kl_weight": self.reference_kl.weight(
            self.update_index)} | stats

    def selected_policy(self) -> tuple[RecurrentPolicy, ObservationNormalizer]:
        """The policy training hands out: with ``select_best_window``, copies of the one kept by
        :mod:`esper_agent.selection`; else, or if no window has finished yet, the trainer's own policy and
        normaliser (not copies)."""
        return self.best_window.handed_out(self.policy, self.obs_norm, self.device)

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
            "selection": self.best_window.state_dict(),
            "reference": self.reference_kl.state_dict(),
            "replay": self.replay.state_dict(),
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
        self.best_window.load_state_dict(state.get("selection"))
        self.reference_kl.load_state_dict(state.get("reference"), self.policy)
        self.replay.load_state_dict(state.get("replay"), self.policy)

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
