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
    dropping the heads the op ignores is equally likely. With Esper's table GERMINATE has, summed over the slots
    it may target, (blueprints allowed in the slot) x 3 x 3 joint actions and WAIT one, so this policy germinates
    whenever it can; a slot is drawn in proportion to its count, so a slot where a hard parameter budget
    (``blueprint_mask``) leaves fewer blueprints is drawn less often, and then a blueprint uniformly among them."""

    def __init__(self, head_sizes: tuple[int, ...], seed: int = 0) -> None:
        self.sizes = head_sizes
        self.offsets = np.cumsum((0, *head_sizes))
        self.relevance = relevance_matrix()
        self.rng = np.random.default_rng(seed)

    def reset(self, num_envs: int) -> None:
        del num_envs

    def _values(self, flat: np.ndarray, head: int, blueprints: np.ndarray | None = None) -> np.ndarray:
        """The values of ``head`` allowed by the flat mask and, for the blueprint, by the slot's blueprint row."""
        allowed = flat[self.offsets[head] : self.offsets[head + 1]]
        if head == Head.BLUEPRINT and blueprints is not None:
            allowed = allowed & blueprints
        return np.flatnonzero(allowed)

    def _slot_counts(self, op: int, op_slot: np.ndarray, flat: np.ndarray, blueprint: np.ndarray | None
                     ) -> np.ndarray:
        """Valid joint actions of ``op`` per slot it may target (one entry when the op ignores the slot)."""
        slots = range(op_slot.shape[1]) if self.relevance[op, Head.SLOT] else [None]
        counts = []
        for slot in slots:
            count = 1.0 if slot is None else float(op_slot[op, slot])
            row = None if slot is None or blueprint is None else blueprint[slot]
            for head in (Head.BLUEPRINT, Head.BLEND, Head.TEMPO):
                if self.relevance[op, head]:
                    count *= len(self._values(flat, head, row))
            counts.append(count)
        return np.array(counts)

    def _pick_slot(self, counts: np.ndarray) -> int:
        slots = np.flatnonzero(counts)
        if np.all(counts[slots] == counts[slots[0]]):
            # Equal counts (always so without a blueprint mask): the plain uniform draw, which keeps the random
            # stream, hence the trajectories, of unrestricted runs what they were before blueprint masks existed.
            return int(self.rng.choice(slots))
        return int(self.rng.choice(slots, p=counts[slots] / counts[slots].sum()))

    def _one(self, op_slot: np.ndarray, flat: np.ndarray, blueprint: np.ndarray | None = None) -> np.ndarray:
        op_ok = op_slot.any(-1) & flat[: len(Op)]
        per_slot = {int(op): self._slot_counts(int(op), op_slot, flat, blueprint) for op in np.flatnonzero(op_ok)}
        counts = np.zeros(len(Op))
        for op, slot_counts in per_slot.items():
            counts[op] = slot_counts.sum()
        op = int(self.rng.choice(len(Op), p=counts / counts.sum()))
        action = np.zeros(len(self.sizes), np.int64)
        action[Head.OP] = op
        row = None
        if self.relevance[op, Head.SLOT]:
            action[Head.SLOT] = self._pick_slot(per_slot[op])
            row = None if blueprint is None else blueprint[action[Head.SLOT]]
        for head in (Head.BLUEPRINT, Head.BLEND, Head.TEMPO):
            if self.relevance[op, head]:
                action[head] = self.rng.choice(self._values(flat, head, row))
        return action

    def act(self, obs: np.ndarray, masks: ActionMasks, episode_start: np.ndarray) -> np.ndarray:
        blueprint = masks.blueprint
        return np.stack([self._one(masks.op_slot[i], masks.flat[i], None if blueprint is None else blueprint[i])
                         for i in range(obs.shape[0])])


__all__ = ["Actor", "StaticActor", "RandomValidActor"]
