"""The rollout loop: act, step the vector env, store real transitions, bootstrap truncations if asked to.

Every rollout starts from ``envs.reset(seed=...)`` with a seed derived from the run seed and the update index,
so a rollout with ``rollout_steps`` equal to the episode length holds whole episodes, and the state of a run
between updates is entirely the agent's (which makes resuming from a checkpoint exact).

Per env step the host waits for the device once: the sampled actions must reach the env as numpy. Everything
else the step produces (log-probs, values, masks used) stays on the agent's device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch

from esper_agent.baselines import Actor
from esper_agent.buffer import Rollout, RolloutStorage
from esper_agent.distributed import SingleProcess
from esper_agent.distributions import ActionMasks
from esper_agent.envs import EnvStep, VectorEnvDriver
from esper_agent.normalize import ObservationNormalizer, RewardScaler
from esper_agent.policy import ActOutput, LSTMState, RecurrentPolicy
from esper_env.spaces import BLUEPRINT_NAMES, Head, Op


class EpisodeRecord(NamedTuple):
    env: int
    episode_return: float  # sum of raw env rewards
    length: int  # transitions
    final_accuracy: float  # val_accuracy at the episode's last step (NaN if the env gives none)
    seed_params: float  # seed_params at the episode's last step (NaN if absent)
    test_accuracy: float  # test_accuracy at the end (NaN if absent)
    rollback: bool  # the governor ended the episode


@dataclass
class RolloutStats:
    """What happened in the env during one rollout (host-side counts)."""

    transitions: int = 0
    op_counts: np.ndarray = field(default_factory=lambda: np.zeros(len(Op), np.int64))  # sampled ops
    executed_counts: np.ndarray = field(default_factory=lambda: np.zeros(len(Op), np.int64))  # info executed_op
    invalid: int = 0
    invalid_reported: int = 0  # transitions whose info had ``invalid_action``
    images: float = 0.0
    episodes: list[EpisodeRecord] = field(default_factory=list)
    # executed GERMINATEs by (slot, blueprint): what the policy tries, when the tracker knows the slot count
    planted: np.ndarray | None = None


def _nan_if_absent(values: np.ndarray, present: np.ndarray, i: int) -> float:
    return float(values[i]) if present[i] else float("nan")


class EpisodeTracker:
    """Accumulates returns and telemetry per sub-env and emits an :class:`EpisodeRecord` when one ends."""

    def __init__(self, num_envs: int, num_slots: int | None = None) -> None:
        self.returns = np.zeros(num_envs)
        self.lengths = np.zeros(num_envs, np.int64)
        self.num_slots = num_slots
        self.begin()

    def begin(self) -> None:
        self.returns[:], self.lengths[:] = 0.0, 0
        planted = None if self.num_slots is None else np.zeros((self.num_slots, len(BLUEPRINT_NAMES)), np.int64)
        self.stats = RolloutStats(planted=planted)

    def record(self, step: EnvStep, actions: np.ndarray) -> list[EpisodeRecord]:
        active, stats, info = step.active, self.stats, step.info
        self.returns[active] += step.reward[active]
        self.lengths[active] += 1
        stats.transitions += int(active.sum())
        stats.op_counts += np.bincount(actions[active, 0], minlength=len(Op))[: len(Op)]
        executed, has_executed = info["executed_op"]
        ops = executed[has_executed].astype(np.int64)
        stats.executed_counts += np.bincount(ops[(ops >= 0) & (ops < len(Op))], minlength=len(Op))
        if stats.planted is not None:
            germinated = active & has_executed & (executed == Op.GERMINATE)
            np.add.at(stats.planted, (actions[germinated, Head.SLOT], actions[germinated, Head.BLUEPRINT]), 1)
        invalid, has_invalid = info["invalid_action"]
        stats.invalid += int(invalid[has_invalid].sum())
        stats.invalid_reported += int(has_invalid.sum())
        images, has_images = info["images_trained"]
        stats.images += float(images[has_images].sum())
        finished = []
        rollback, has_rollback = info["rollback"]
        for i in np.flatnonzero(active & (step.terminated | step.truncated)):
            # Esper terminates only on a governor rollback; other envs may say so in info["rollback"].
            rolled_back = bool(rollback[i]) if has_rollback[i] else bool(step.terminated[i])
            finished.append(EpisodeRecord(
                int(i), float(self.returns[i]), int(self.lengths[i]), _nan_if_absent(*info["val_accuracy"], i),
                _nan_if_absent(*info["seed_params"], i), _nan_if_absent(*info["test_accuracy"], i), rolled_back))
            self.returns[i], self.lengths[i] = 0.0, 0
        stats.episodes.extend(finished)
        return finished


def masks_to_device(masks: ActionMasks, device: torch.device) -> ActionMasks:
    return ActionMasks(*(None if mask is None else torch.as_tensor(mask, device=device) for mask in masks))


class Collector:
    """Fills a :class:`RolloutStorage` from a vector env with the current policy."""

    def __init__(self, driver: VectorEnvDriver, policy: RecurrentPolicy, obs_norm: ObservationNormalizer,
                 reward_scaler: RewardScaler, storage: RolloutStorage, ranks: SingleProcess,
                 bootstrap_truncation: bool) -> None:
        self.driver, self.policy, self.obs_norm, self.reward_scaler = driver, policy, obs_norm, reward_scaler
        self.storage, self.device, self.ranks = storage, storage.device, ranks
        self.bootstrap_truncation = bootstrap_truncation
        self.tracker = EpisodeTracker(driver.num_envs, driver.num_slots or None)  # 0: not an Esper action space

    def _obs_tensor(self, obs: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(self.obs_norm.normalize(obs), device=self.device)

    def collect(self, seed: int | list[int], generator: torch.Generator, teacher: Actor | None = None
                ) -> tuple[Rollout, RolloutStats]:
        """One rollout of ``storage.steps`` steps per sub-env (steps where no sub-env moved do not count).

        With a ``teacher`` the teacher acts and the policy only scores its actions (a demonstration to imitate:
        :mod:`esper_agent.imitate`); everything else (storage, normalisers, statistics) is as for the policy's
        own rollout. Such a rollout stores the policy's log-probs of the teacher's actions, not of actions the
        policy sampled: it is for imitation, never for a PPO update."""
        obs, masks = self.driver.reset(seed)
        n = self.driver.num_envs
        state = self.policy.initial_state(n, self.device)
        starts = np.ones(n, bool)
        if teacher is not None:
            teacher.reset(n)
        self.storage.begin(state)
        self.reward_scaler.begin_rollout()
        self.tracker.begin()
        stored = 0
        while stored < self.storage.steps:
            obs_t, starts_t = self._obs_tensor(obs), torch.as_tensor(starts, device=self.device)
            given = None if teacher is None else torch.as_tensor(teacher.act(obs, masks, starts), device=self.device)
            out = self.policy.step(obs_t, masks_to_device(masks, self.device), state, starts_t, generator,
                                   given=given)
            actions = out.action.cpu().numpy()  # sync: the Gym API takes the actions as host arrays
            step = self.driver.step(actions)
            if step.active.any():
                self._store(obs, obs_t, starts, out, step)
                stored += 1
            self._bootstrap_truncations(step, out.state)
            self.tracker.record(step, actions)
            state, obs, masks, starts = out.state, step.obs, step.masks, step.episode_start
        starts_t = torch.as_tensor(starts, device=self.device)
        last_values = self.policy.predict_value(self._obs_tensor(obs), state, starts_t)
        # Normalisers change once per rollout, after it, with every rank's rollout (see esper_agent.normalize).
        self.obs_norm.commit(self.ranks)
        self.reward_scaler.commit(self.ranks)
        return self.storage.finish(last_values), self.tracker.stats

    def _store(self, raw_obs: np.ndarray, obs_t: torch.Tensor, starts: np.ndarray, out: ActOutput,
               step: EnvStep) -> None:
        active = step.active
        self.obs_norm.observe(raw_obs[active])
        flags = np.stack([step.reward, step.terminated, step.truncated, starts], 1).astype(np.float32)
        self.storage.add(active, obs_t, out, flags)
        self.reward_scaler.observe(step.reward, active, step.terminated | step.truncated)

    def _bootstrap_truncations(self, step: EnvStep, state: LSTMState) -> None:
        """V(terminal observation), one step on from the state that saw the episode's last action."""
        rows = step.truncated & ~step.terminated
        if not rows.any() or not self.bootstrap_truncation:  # unset bootstrap values are 0: the return ends
            return
        no_reset = torch.zeros(self.driver.num_envs, dtype=torch.bool, device=self.device)
        values = self.policy.predict_value(self._obs_tensor(step.final_obs), state, no_reset)
        self.storage.set_bootstrap(rows, values)


def rollout_seed(seed: int, update: int) -> int:
    """The env reset seed of one rollout: a function of (run seed, update index) only, so a resumed run
    resets its envs exactly as the uninterrupted run would have."""
    return int(np.random.SeedSequence([seed, update]).generate_state(1)[0] & 0x7FFFFFFF)


def rank_reset_seed(seed: int, update: int, rank: int, num_envs: int) -> int:
    """The reset seed of one rank's vector env: a vector env seeds sub-env ``i`` with ``seed + i``, so sub-env
    ``i`` of rank ``r`` gets the seed of sub-env ``r * num_envs + i`` of one process running every sub-env
    (with seed groups, :func:`grouped_reset_seeds`, each rank draws its groups from its own range)."""
    return rollout_seed(seed, update) + rank * num_envs


def grouped_reset_seeds(seed: int, num_envs: int, group_size: int) -> int | list[int]:
    """The reset seed(s) of a vector env whose sub-envs come in groups of ``group_size`` sharing a seed: ``seed``
    itself when groups are off (1: the vector env seeds sub-env ``i`` with ``seed + i``), else sub-env ``i`` gets
    ``seed + i // group_size``, inside the same range of seeds, so ranks (``rank_reset_seed``) never share one."""
    if group_size < 1 or num_envs % group_size:
        raise ValueError(f"seed_group_size={group_size} must be >= 1 and divide num_envs={num_envs}")
    if group_size == 1:
        return seed
    return [seed + i // group_size for i in range(num_envs)]


def merge_rollout_stats(parts: list[RolloutStats]) -> RolloutStats:
    """One :class:`RolloutStats` for the rollouts of every rank (episodes in rank order)."""
    if len(parts) == 1:
        return parts[0]
    merged = RolloutStats()
    for part in parts:
        merged.transitions += part.transitions
        merged.op_counts += part.op_counts
        merged.executed_counts += part.executed_counts
        merged.invalid += part.invalid
        merged.invalid_reported += part.invalid_reported
        merged.images += part.images
        merged.episodes.extend(part.episodes)
        if part.planted is not None:
            merged.planted = part.planted.copy() if merged.planted is None else merged.planted + part.planted
    return merged


__all__ = ["Collector", "EpisodeTracker", "EpisodeRecord", "RolloutStats", "rollout_seed", "rank_reset_seed",
           "grouped_reset_seeds", "merge_rollout_stats", "masks_to_device"]
