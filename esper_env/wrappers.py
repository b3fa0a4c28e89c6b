"""``FlattenActions``: one ``Discrete`` action over the joint combinations, with an exact mask.

sb3-contrib's MaskablePPO masks each head of a ``MultiDiscrete`` independently, so it can only see the
marginal masks and may pick an op/slot pair that is invalid. Flattening the heads into one ``Discrete`` over
the canonical joint actions (WAIT once; GERMINATE x slot x blueprint x blend x tempo; ADVANCE, PRUNE,
FOSSILIZE x slot) makes the flat mask exact (it reads ``op_slot_mask`` and, when the env gives them,
``blueprint_mask`` and ``blend_mask``), so a flat-mask algorithm can be compared fairly. Heads an op does not
read are fixed to 0 in the canonical action. 199 joint actions with the default 3 slots.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import VectorActionWrapper, VectorEnv

from esper_env.spaces import HEAD_RELEVANCE, Head, Op, head_sizes, relevance_matrix


@functools.cache
def joint_actions(num_slots: int) -> np.ndarray:
    """The canonical joint actions ``(J, num_heads)``, int64, op-major."""
    sizes = head_sizes(num_slots)
    rows = []
    for op in Op:
        ranges = [range(sizes[h]) if h in HEAD_RELEVANCE[op] and h != Head.OP else range(1) for h in Head]
        ranges[Head.OP] = range(op, op + 1)
        rows.extend(itertools.product(*ranges))
    table = np.array(rows, dtype=np.int64)
    table.setflags(write=False)
    return table


def joint_mask(op_slot: np.ndarray, blueprint_mask: np.ndarray | None = None,
               blend_mask: np.ndarray | None = None) -> np.ndarray:
    """Exact validity of every joint action, from one sub-env's ``op_slot_mask``, ``blueprint_mask`` (bool
    ``(num_slots, num_blueprints)``; None = every blueprint allowed in every slot) and ``blend_mask`` (bool
    ``(num_slots, num_blueprints, num_blends)``; None = every blend allowed for every planting)."""
    table = joint_actions(op_slot.shape[1])
    mask = op_slot[table[:, Head.OP], table[:, Head.SLOT]]
    slot, blueprint = table[:, Head.SLOT], table[:, Head.BLUEPRINT]
    # Only the ops that read a head answer to its mask; the others hold the placeholder 0 there.
    if blueprint_mask is not None:
        reads = relevance_matrix()[table[:, Head.OP], Head.BLUEPRINT]
        mask &= ~reads | blueprint_mask[slot, blueprint]
    if blend_mask is not None:
        reads = relevance_matrix()[table[:, Head.OP], Head.BLEND]
        mask &= ~reads | blend_mask[slot, blueprint, table[:, Head.BLEND]]
    return mask


def joint_masks(op_slot: np.ndarray, blueprint_mask: np.ndarray | None = None,
                blend_mask: np.ndarray | None = None) -> np.ndarray:
    """:func:`joint_mask` of every sub-env: ``op_slot`` ``(N, num_ops, num_slots)``, ``blueprint_mask``
    ``(N, num_slots, num_blueprints)`` or None, ``blend_mask`` ``(N, num_slots, num_blueprints, num_blends)`` or
    None."""
    return np.stack([joint_mask(m, None if blueprint_mask is None else blueprint_mask[i],
                                None if blend_mask is None else blend_mask[i])
                     for i, m in enumerate(op_slot)])


def defer_keep_joint(masks: np.ndarray, at_deadline: np.ndarray) -> np.ndarray:
    """The joint masks ``masks`` (``(..., J)``, :func:`joint_mask`'s) with each FOSSILIZE index allowed only where
    its slot's seed is at its keep deadline (``at_deadline``, ``(..., num_slots)``): still exact under the deferred
    keep (:func:`esper_env.masks.deadline_keeps`)."""
    deadline = np.asarray(at_deadline, dtype=bool)
    table = joint_actions(deadline.shape[-1])
    allowed = (table[:, Head.OP] != Op.FOSSILIZE) | deadline[..., table[:, Head.SLOT]]
    return np.asarray(masks, dtype=bool) & allowed


class FlattenActions(gym.ActionWrapper):
    """Single-env wrapper: ``Discrete(J)`` actions; ``action_masks()`` and ``info["action_mask"]`` are exact."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._table = joint_actions(int(env.action_space.nvec[Head.SLOT]))
        self.action_space = gym.spaces.Discrete(len(self._table))
        self._mask = np.zeros(len(self._table), dtype=bool)

    def action(self, action: Any) -> np.ndarray:
        return self._table[_index(action, len(self._table))]

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        return obs, self._remask(info)

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, self._remask(info)

    def _remask(self, info: dict[str, Any]) -> dict[str, Any]:
        self._mask = joint_mask(info["op_slot_mask"], info.get("blueprint_mask"), info.get("blend_mask"))
        return {**info, "action_mask": self._mask.copy()}

    def action_masks(self) -> np.ndarray:
        return self._mask.copy()


class FlattenVectorActions(VectorActionWrapper):
    """The same for the native vector env: actions of shape ``(num_envs,)``, masks ``(num_envs, J)``."""

    def __init__(self, env: VectorEnv) -> None:
        super().__init__(env)
        self._table = joint_actions(int(env.single_action_space.nvec[Head.SLOT]))
        self.single_action_space = gym.spaces.Discrete(len(self._table))
        self.action_space = gym.spaces.MultiDiscrete(np.full(env.num_envs, len(self._table)))
        self._masks = np.zeros((env.num_envs, len(self._table)), dtype=bool)

    def actions(self, actions: Any) -> np.ndarray:
        array = np.asarray(actions)
        if array.shape != (self.num_envs,):
            raise ValueError(f"actions have shape {array.shape}; expected ({self.num_envs},)")
        return np.stack([self._table[_index(a, len(self._table))] for a in array])

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        return obs, self._remask(info)

    def step(self, actions: Any):
        obs, rewards, terminated, truncated, info = super().step(actions)
        return obs, rewards, terminated, truncated, self._remask(info)

    def _remask(self, info: dict[str, Any]) -> dict[str, Any]:
        self._masks = joint_masks(info["op_slot_mask"], info.get("blueprint_mask"), info.get("blend_mask"))
        return {**info, "action_mask": self._masks.copy()}

    def action_masks(self) -> np.ndarray:
        return self._masks.copy()


def _index(action: Any, size: int) -> int:
    value = np.asarray(action)
    if value.shape != () or value.dtype.kind not in "iu" or not 0 <= int(value) < size:
        raise ValueError(f"flat action {action!r}; expected an integer in [0, {size})")
    return int(value)
