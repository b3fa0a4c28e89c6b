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
    it may target, (blueprint, blend) pairs allowed in the slot x 3 tempos joint actions and WAIT one, so this
    policy germinates whenever it can. Each draw is in proportion to the joint actions below it: a slot where a
    hard parameter budget (``blueprint_mask``) leaves fewer blueprints is drawn less often, and so is a blueprint
    whose gated blend does not fit (``blend_mask``); then the blend is uniform among those allowed."""

    def __init__(self, head_sizes: tuple[int, ...], seed: int = 0) -> None:
        self.sizes = head_sizes
        self.offsets = np.cumsum((0, *head_sizes))
        self.relevance = relevance_matrix()
        self.rng = np.random.default_rng(seed)

    def reset(self, num_envs: int) -> None:
        del num_envs

    def _head_mask(self, op: int, flat: np.ndarray, head: int) -> np.ndarray:
        """The values of ``head`` the flat mask allows, or only the placeholder 0 when ``op`` ignores the head."""
        if self.relevance[op, head]:
            return flat[self.offsets[head] : self.offsets[head + 1]]
        return np.arange(self.sizes[head]) == 0

    def _plantings(self, op: int, flat: np.ndarray, slot: int | None, masks: ActionMasks, i: int) -> np.ndarray:
        """``(num_blueprints, num_blends)`` bool: the (blueprint, blend) values ``op`` may take in ``slot`` of
        sub-env ``i``, by the flat mask and, for an op that reads them, the blueprint and blend masks."""
        blueprints = self._head_mask(op, flat, Head.BLUEPRINT)
        if slot is not None and masks.blueprint is not None and self.relevance[op, Head.BLUEPRINT]:
            blueprints = blueprints & masks.blueprint[i][slot]
        pairs = blueprints[:, None] & self._head_mask(op, flat, Head.BLEND)[None, :]
        if slot is not None and masks.blend is not None and self.relevance[op, [Head.BLUEPRINT, Head.BLEND]].all():
            pairs = pairs & masks.blend[i][slot]
        return pairs

    def _slot_counts(self, op: int, flat: np.ndarray, masks: ActionMasks, i: int) -> np.ndarray:
        """Valid joint actions of ``op`` per slot it may target (one entry when the op ignores the slot)."""
        op_slot = masks.op_slot[i]
        slots = range(op_slot.shape[1]) if self.relevance[op, Head.SLOT] else [None]
        tempos = self._head_mask(op, flat, Head.TEMPO).sum()
        counts = [(1.0 if slot is None else float(op_slot[op, slot])) * tempos
                  * self._plantings(op, flat, slot, masks, i).sum() for slot in slots]
        return np.array(counts)

    def _pick(self, counts: np.ndarray) -> int:
        """An index drawn in proportion to ``counts`` (the joint actions under each value)."""
        values = np.flatnonzero(counts)
        if np.all(counts[values] == counts[values[0]]):
            # Equal counts (always so without a budget mask): the plain uniform draw, which keeps the random
            # stream, hence the trajectories, of unrestricted runs what they were before budget masks existed.
            return int(self.rng.choice(values))
        return int(self.rng.choice(values, p=counts[values] / counts[values].sum()))

    def _one(self, masks: ActionMasks, i: int) -> np.ndarray:
        op_slot, flat = masks.op_slot[i], masks.flat[i]
        op_ok = op_slot.any(-1) & flat[: len(Op)]
        per_slot = {int(op): self._slot_counts(int(op), flat, masks, i) for op in np.flatnonzero(op_ok)}
        counts = np.zeros(len(Op))
        for op, slot_counts in per_slot.items():
            counts[op] = slot_counts.sum()
        op = int(self.rng.choice(len(Op), p=counts / counts.sum()))
        action = np.zeros(len(self.sizes), np.int64)
        action[Head.OP] = op
        slot = None
        if self.relevance[op, Head.SLOT]:
            slot = action[Head.SLOT] = self._pick(per_slot[op])
        pairs = self._plantings(op, flat, slot, masks, i)
        if self.relevance[op, Head.BLUEPRINT]:
            action[Head.BLUEPRINT] = self._pick(pairs.sum(-1))
        if self.relevance[op, Head.BLEND]:
            action[Head.BLEND] = self.rng.choice(np.flatnonzero(pairs[action[Head.BLUEPRINT]]))
        if self.relevance[op, Head.TEMPO]:
            action[Head.TEMPO] = self.rng.choice(np.flatnonzero(self._head_mask(op, flat, Head.TEMPO)))
        return action

    def act(self, obs: np.ndarray, masks: ActionMasks, episode_start: np.ndarray) -> np.ndarray:
        return np.stack([self._one(masks, i) for i in range(obs.shape[0])])


__all__ = ["Actor", "StaticActor", "RandomValidActor"]
