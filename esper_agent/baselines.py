"""Policies without learning, for comparisons: ``static`` (always WAIT) and ``random`` (uniform over the valid
joint actions). Both speak the :class:`Actor` protocol that :func:`esper_agent.evaluate.run_episodes` drives.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from esper_agent.distributions import ActionMasks
from esper_env.spaces import Head, Op, relevance_matrix


class Actor(Protocol):
    def reset(self, num_envs: int) -> None: ...

    def act(self, obs: np.ndarray, masks: ActionMasks, episode_start: np.ndarray) -> np.ndarray: ...


class StaticActor:
    """Always WAIT: the host trains alone."""

    def reset(self, num_envs: int) -> None:
        del num_envs

    def act(self, obs: np.ndarray, masks: ActionMasks, episode_start: np.ndarray) -> np.ndarray:
        return np.zeros((obs.shape[0], len(Head)), np.int64)  # op WAIT, placeholders elsewhere


class RandomValidActor:
    """Uniform over the valid *joint* actions: every distinct valid (op, slot, blueprint, blend, tempo) after
    dropping the heads the op ignores is equally likely. With Esper's table GERMINATE has (valid slots) x 7 x 3 x 3
    joint actions and WAIT one, so this policy germinates whenever it can."""

    def __init__(self, head_sizes: tuple[int, ...], seed: int = 0) -> None:
        self.sizes = head_sizes
        self.offsets = np.cumsum((0, *head_sizes))
        self.relevance = relevance_matrix()
        self.rng = np.random.default_rng(seed)

    def reset(self, num_envs: int) -> None:
        del num_envs

    def _values(self, flat: np.ndarray, head: int) -> np.ndarray:
        return np.flatnonzero(flat[self.offsets[head] : self.offsets[head + 1]])

    def _one(self, op_slot: np.ndarray, flat: np.ndarray) -> np.ndarray:
        op_ok = op_slot.any(-1) & flat[: len(Op)]
        counts = np.zeros(len(Op))
        for op in np.flatnonzero(op_ok):
            count = float(op_slot[op].sum()) if self.relevance[op, Head.SLOT] else 1.0
            for head in (Head.BLUEPRINT, Head.BLEND, Head.TEMPO):
                if self.relevance[op, head]:
                    count *= len(self._values(flat, head))
            counts[op] = count
        op = int(self.rng.choice(len(Op), p=counts / counts.sum()))
        action = np.zeros(len(self.sizes), np.int64)
        action[Head.OP] = op
        if self.relevance[op, Head.SLOT]:
            action[Head.SLOT] = self.rng.choice(np.flatnonzero(op_slot[op]))
        for head in (Head.BLUEPRINT, Head.BLEND, Head.TEMPO):
            if self.relevance[op, head]:
                action[head] = self.rng.choice(self._values(flat, head))
        return action

    def act(self, obs: np.ndarray, masks: ActionMasks, episode_start: np.ndarray) -> np.ndarray:
        return np.stack([self._one(masks.op_slot[i], masks.flat[i]) for i in range(obs.shape[0])])


__all__ = ["Actor", "StaticActor", "RandomValidActor"]
