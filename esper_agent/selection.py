"""Keep the policy with the best recent training returns, not only the last one (``select_best_window``).

PPO's last policy is not always its best. On Esper-CIFAR10-Fast-v0 one seed in five played the heuristic's plan
for about 60 updates, then its first slot's blueprint drifted to a worse one within three updates
(docs/experiments/2026-11-27-entropy-all-steps.md, seed 2). Its heads were nearly deterministic by then, so it
never sampled the old choice again, and its return stayed lower to the end.

With ``AgentConfig.select_best_window = W`` the trainer scores every W consecutive PPO rollouts by the mean of
their mean episode returns (the mean episode return where every rollout holds the same number of whole
episodes, as the trainer's do when ``rollout_steps`` is the episode length) and keeps the policy of the best
window found so far. The score is the agent's own objective, measured in episodes it trained on (the reward
reads validation accuracy), so choosing costs no env steps and never sees test data. This is the usual "best
model so far" of RL libraries, minus the separate evaluation episodes, which would spend host epochs outside the
training budget.

What is kept is the network and observation normaliser that *collected* the window's last rollout (captured
before that rollout's update): a policy whose returns were measured, rather than the untested update after it.
Imitation rollouts do not count (the heuristic acted in them), and a window restarts after a rollout that
finished no episode.
"""

from __future__ import annotations

import copy
import math
from collections import deque
from typing import Any

import torch

from esper_agent.normalize import ObservationNormalizer
from esper_agent.policy import RecurrentPolicy

Snapshot = dict[str, Any]
"""A policy's ``state_dict`` and its observation normaliser's, under the keys ``policy`` and ``obs_norm``."""


def snapshot(policy: RecurrentPolicy, obs_norm: ObservationNormalizer) -> Snapshot:
    """Copies of the network's and the normaliser's states (later updates do not change them)."""
    weights = {k: v.detach().clone() for k, v in policy.state_dict().items()}
    return {"policy": weights, "obs_norm": copy.deepcopy(obs_norm.state_dict())}


class BestPolicy:
    """The best window of ``window`` consecutive rollouts' mean returns so far, and the policy that ended it."""

    def __init__(self, window: int) -> None:
        if window < 1:
            raise ValueError(f"window={window}: expected a number of rollouts >= 1")
        self.window = window
        self.recent: deque[float] = deque(maxlen=window)
        self.score = -math.inf  # the best window's mean return
        self.update: int | None = None  # the update whose rollout ended the best window
        self.best: Snapshot | None = None

    def observe(self, return_mean: float, update: int, collector: Snapshot) -> bool:
        """Add one rollout's mean episode return (``update``: its update's number, counted from 1), collected by
        the policy in ``collector``; returns whether that policy is now the best."""
        if not math.isfinite(return_mean):
            self.recent.clear()  # no finished episode to score: the window restarts
            return False
        self.recent.append(return_mean)
        if len(self.recent) < self.window:
            return False
        score = sum(self.recent) / self.window
        if score <= self.score:  # a tie keeps the earlier policy
            return False
        self.score, self.update, self.best = score, update, collector
        return True

    def metrics(self) -> dict[str, float]:
        found = self.update is not None
        return {"selection/best_return": self.score if found else math.nan,
                "selection/best_update": float(self.update) if found else math.nan}

    def state_dict(self) -> dict[str, Any]:
        return {"window": self.window, "recent": list(self.recent), "score": self.score, "update": self.update,
                "best": self.best}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["window"] != self.window:
            raise ValueError(f"the saved selection scored windows of {state['window']} rollouts, this one "
                             f"{self.window}")
        self.recent = deque((float(x) for x in state["recent"]), maxlen=self.window)
        self.score, self.update, self.best = float(state["score"]), state["update"], state["best"]


def kept_policy(kept: Snapshot, like: RecurrentPolicy, obs_norm_like: ObservationNormalizer,
                device: str | torch.device) -> tuple[RecurrentPolicy, ObservationNormalizer]:
    """Copies of ``like`` and ``obs_norm_like`` (the trained network and normaliser, for their settings) holding
    the kept snapshot (:attr:`BestPolicy.best`, or a checkpoint's ``selection["best"]``)."""
    policy, obs_norm = copy.deepcopy(like), copy.deepcopy(obs_norm_like)
    policy.load_state_dict(kept["policy"])
    obs_norm.load_state_dict(kept["obs_norm"])
    return policy.to(device).eval(), obs_norm


__all__ = ["BestPolicy", "Snapshot", "kept_policy", "snapshot"]
