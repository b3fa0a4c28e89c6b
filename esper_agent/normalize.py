"""Observation and reward normalisers, kept on the host in float64 (the env hands over numpy anyway).

The order within one update is fixed and tested:

1. during a rollout both normalisers are *frozen*: observations are normalised with the statistics of earlier
   rollouts, and the rollout only accumulates what it sees (:meth:`observe`);
2. right after the rollout each normaliser folds what it accumulated into its statistics once (:meth:`commit`);
   under torchrun every rank folds in every rank's rollout, in rank order, so all ranks keep identical
   statistics (see ``esper_agent.distributed``);
3. the rollout's rewards are then scaled with the reward statistics that include this rollout, before GAE.

Observations stored in the rollout are the normalised ones the policy acted on, so the PPO update replays
exactly what the rollout saw whatever the normaliser does later.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from esper_agent.distributed import SINGLE, SingleProcess

EPS = 1e-8


class RunningMeanStd:
    """Running mean and variance over batches (Chan et al.'s parallel merge), float64."""

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = 0.0

    def update(self, batch: np.ndarray) -> None:
        batch = np.asarray(batch, np.float64)
        if batch.shape[0] == 0:
            return
        self.merge(batch.mean(0), batch.var(0), batch.shape[0])

    def merge(self, batch_mean: np.ndarray, batch_var: np.ndarray, batch_count: float) -> None:
        total = self.count + batch_count
        delta = batch_mean - self.mean
        new_mean = self.mean + delta * batch_count / total
        m2 = self.var * self.count + batch_var * batch_count + delta**2 * self.count * batch_count / total
        self.mean, self.var, self.count = np.asarray(new_mean), np.asarray(m2 / total), total

    def commit(self, pending: list[np.ndarray], ranks: SingleProcess = SINGLE) -> None:
        """Fold this rank's ``pending`` batches (and under torchrun every other rank's, in rank order) in."""
        batch = np.concatenate(pending) if pending else np.zeros((0, *self.mean.shape))
        for moments in ranks.gather_moments(batch):
            self.merge(*moments)

    def state_dict(self) -> dict[str, Any]:
        return {"mean": torch.from_numpy(np.array(self.mean, np.float64)),
                "var": torch.from_numpy(np.array(self.var, np.float64)), "count": float(self.count)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        mean, var = state["mean"].numpy().astype(np.float64), state["var"].numpy().astype(np.float64)
        if mean.shape != self.mean.shape:
            raise ValueError(f"normaliser shape {mean.shape} does not match {self.mean.shape}")
        self.mean, self.var, self.count = mean, var, float(state["count"])


class ObservationNormalizer:
    """``clip((obs - mean) / std, -clip, clip)`` with statistics frozen within a rollout."""

    def __init__(self, obs_dim: int, clip: float, enabled: bool = True) -> None:
        self.stats = RunningMeanStd((obs_dim,))
        self.clip, self.enabled = clip, enabled
        self._pending: list[np.ndarray] = []

    def normalize(self, obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs, np.float64)
        if not self.enabled:
            return obs.astype(np.float32)
        scaled = (obs - self.stats.mean) / np.sqrt(self.stats.var + EPS)
        return np.clip(scaled, -self.clip, self.clip).astype(np.float32)

    def observe(self, obs: np.ndarray) -> None:
        """Remember raw observations the policy acted on; they affect the statistics only at :meth:`commit`."""
        if self.enabled and len(obs):
            self._pending.append(np.array(obs, np.float64))

    def commit(self, ranks: SingleProcess = SINGLE) -> None:
        self.stats.commit(self._pending, ranks)
        self._pending = []

    def state_dict(self) -> dict[str, Any]:
        return self.stats.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stats.load_state_dict(state)
        self._pending = []


class RewardScaler:
    """Divides rewards by the running std of the discounted return, then clips (no mean is subtracted).

    Accumulating ``return = gamma * return + reward`` per sub-env and normalising by its std keeps the scale
    of the critic's targets near 1 whatever the size of the env's rewards (Esper's are ~0.01-0.1 per step).
    """

    def __init__(self, num_envs: int, gamma: float, clip: float, enabled: bool = True) -> None:
        self.stats = RunningMeanStd(())
        self.gamma, self.clip, self.enabled = gamma, clip, enabled
        self.returns = np.zeros(num_envs, np.float64)
        self._pending: list[np.ndarray] = []

    def begin_rollout(self) -> None:
        """Rollouts start from freshly reset envs, so no discounted return carries over."""
        self.returns[:] = 0.0

    def observe(self, rewards: np.ndarray, active: np.ndarray, done: np.ndarray) -> None:
        """Add one step's raw rewards for the sub-envs that made a real transition; restart finished ones."""
        self.returns[active] = self.returns[active] * self.gamma + np.asarray(rewards, np.float64)[active]
        if self.enabled and active.any():
            self._pending.append(self.returns[active].copy())
        self.returns[done] = 0.0

    def commit(self, ranks: SingleProcess = SINGLE) -> None:
        self.stats.commit(self._pending, ranks)
        self._pending = []

    @property
    def scale(self) -> float:
        """Multiplier applied to raw rewards (1 when disabled)."""
        return 1.0 / float(np.sqrt(self.stats.var + EPS)) if self.enabled else 1.0

    def scale_rewards(self, rewards: torch.Tensor) -> torch.Tensor:
        return (rewards * self.scale).clamp(-self.clip, self.clip) if self.enabled else rewards

    def state_dict(self) -> dict[str, Any]:
        return {"stats": self.stats.state_dict(), "returns": torch.from_numpy(self.returns.copy())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stats.load_state_dict(state["stats"])
        returns = state["returns"].numpy().astype(np.float64)
        if returns.shape != self.returns.shape:
            raise ValueError(f"reward scaler has {returns.shape[0]} sub-envs; this run has {self.returns.shape[0]}")
        self.returns = returns
        self._pending = []


__all__ = ["RunningMeanStd", "ObservationNormalizer", "RewardScaler"]
