"""One face over a Gymnasium vector env whatever its autoreset mode, plus the masks and telemetry in ``info``.

Gymnasium vector envs end episodes in three ways (``envs.metadata["autoreset_mode"]``):
- ``NEXT_STEP`` (default): the step that ends an episode returns the terminal observation; the *next* step
  ignores the action and returns the reset observation with reward 0. That step is not a transition: the
  driver marks it inactive so that nothing stores it, and flags the returned observation as an episode start;
- ``SAME_STEP``: the ending step already returns the reset observation; the terminal one is in
  ``info["final_obs"]`` and the terminal info in ``info["final_info"]``;
- ``DISABLED``: the ending step returns the terminal observation and the driver resets the finished sub-envs
  itself with ``reset(options={"reset_mask": ...})``.
:class:`VectorEnvDriver` turns all three into :class:`EnvStep`: per sub-env, whether the step was a real
transition, its reward and end flags, the terminal observation (for bootstrapping truncations), the next
observation with *its* masks, and whether that observation starts an episode.
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from esper_agent.distributions import ActionMasks
from esper_env import spaces
from esper_env.masks import at_keep_deadline
from esper_env.spaces import Head, Op

TELEMETRY_KEYS = ("invalid_action", "executed_op", "val_accuracy", "seed_params", "rollback", "test_accuracy",
                  "images_trained")
"""``info`` keys read for telemetry when present (arrays over sub-envs, each with an optional ``_key`` mask)."""


class EnvStep(NamedTuple):
    obs: np.ndarray  # (N, obs_dim): what the agent acts on next
    masks: ActionMasks  # numpy masks for ``obs``
    reward: np.ndarray  # (N,) float64; 0 where inactive
    terminated: np.ndarray  # (N,) bool; False where inactive
    truncated: np.ndarray  # (N,) bool; False where inactive
    active: np.ndarray  # (N,) bool: a real transition (False for a NEXT_STEP reset step)
    episode_start: np.ndarray  # (N,) bool: ``obs[i]`` is the first observation of an episode
    final_obs: np.ndarray  # (N, obs_dim): the terminal observation where the episode ended, else ``obs``
    info: dict[str, tuple[np.ndarray, np.ndarray]]  # key -> (float64 values (N,), present (N,)) of the transition


def read_info(info: dict[str, Any], key: str, num_envs: int) -> tuple[np.ndarray, np.ndarray]:
    """``(values as float64, present)`` for one per-sub-env ``info`` key; absent or malformed -> not present."""
    values, present = np.zeros(num_envs), np.zeros(num_envs, bool)
    raw = info.get(key)
    if raw is None:
        return values, present
    try:
        array = np.asarray(raw, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        return values, present
    if array.shape[0] != num_envs:
        return values, present
    flags = np.asarray(info.get(f"_{key}", np.ones(num_envs, bool)), bool).reshape(-1)
    return np.where(flags, array, 0.0), flags.copy()


def autoreset_mode(envs: gym.vector.VectorEnv) -> AutoresetMode:
    mode = envs.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    return AutoresetMode(mode.value if isinstance(mode, AutoresetMode) else mode)


class VectorEnvDriver:
    """Steps a vector env with a ``MultiDiscrete(spaces.head_sizes(num_slots))`` action space."""

    def __init__(self, envs: gym.vector.VectorEnv) -> None:
        action_space, obs_space = envs.single_action_space, envs.single_observation_space
        if not isinstance(action_space, gym.spaces.MultiDiscrete) or action_space.nvec.ndim != 1:
            raise TypeError(f"single_action_space must be a 1-D MultiDiscrete; got {action_space}")
        self.num_slots = int(action_space.nvec[Head.SLOT]) if len(action_space.nvec) > Head.SLOT else 0
        self.head_sizes = spaces.head_sizes(self.num_slots)
        if tuple(int(n) for n in action_space.nvec) != self.head_sizes:
            raise ValueError(f"action space nvec {action_space.nvec.tolist()} does not match "
                             f"esper_env.spaces.head_sizes({self.num_slots}) = {list(self.head_sizes)}")
        if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
            raise TypeError(f"single_observation_space must be a 1-D Box; got {obs_space}")
        self.envs, self.num_envs, self.obs_dim = envs, envs.num_envs, int(obs_space.shape[0])
        self.mode = autoreset_mode(envs)
        self.relevance = spaces.relevance_matrix()
        self._pending = np.zeros(self.num_envs, bool)
        self._warned = False
        self.last_info: dict[str, Any] = {}
        """The raw ``info`` of the last :meth:`step`, before any DISABLED-mode reset: for callers that record more
        than :data:`TELEMETRY_KEYS` (``esper_agent.evaluate`` draws timelines from it)."""

    def reset(self, seed: int | list[int] | None = None) -> tuple[np.ndarray, ActionMasks]:
        obs, info = self.envs.reset(seed=seed)
        self._pending[:] = False
        return np.asarray(obs, np.float32), self.masks_from_info(info)

    def step(self, actions: np.ndarray) -> EnvStep:
        obs, reward, terminated, truncated, info = self.envs.step(actions)
        self.last_info = info
        obs = np.array(obs, np.float32)
        reward = np.asarray(reward, np.float64).copy()
        terminated, truncated = np.asarray(terminated, bool).copy(), np.asarray(truncated, bool).copy()
        masks = self.masks_from_info(info)
        active = ~self._pending
        if self.mode == AutoresetMode.NEXT_STEP:
            # A pending sub-env was reset by this step: its action was ignored and it made no transition.
            reward[~active], terminated[~active], truncated[~active] = 0.0, False, False
            done = terminated | truncated
            starts, final_obs, telemetry = self._pending.copy(), obs.copy(), info
            self._pending = done
        else:
            done = terminated | truncated
            starts, final_obs, telemetry = done.copy(), obs.copy(), info
            if self.mode == AutoresetMode.SAME_STEP and done.any():
                final_obs, telemetry = self._same_step_finals(info, obs, done)
            elif self.mode == AutoresetMode.DISABLED and done.any():
                obs, masks = self._reset_finished(obs, masks, done)
        values = {key: read_info(telemetry, key, self.num_envs) for key in TELEMETRY_KEYS}
        values = {key: (v, p & active) for key, (v, p) in values.items()}
        return EnvStep(obs, masks, reward, terminated, truncated, active, starts, final_obs, values)

    def _same_step_finals(self, info: dict[str, Any], obs: np.ndarray, done: np.ndarray
                          ) -> tuple[np.ndarray, dict[str, Any]]:
        """Terminal observations and a telemetry view that reads ``final_info`` for the finished sub-envs."""
        final_obs = obs.copy()
        finals = info.get("final_obs")
        if finals is None:
            raise KeyError("SAME_STEP autoreset: info has no 'final_obs' for a finished sub-env")
        for i in np.flatnonzero(done):
            final_obs[i] = np.asarray(finals[i], np.float32)
        final_info = info.get("final_info", {})
        merged: dict[str, Any] = {}
        for key in TELEMETRY_KEYS:
            now, now_present = read_info(info, key, self.num_envs)
            end, end_present = read_info(final_info, key, self.num_envs)
            merged[key] = np.where(done, end, now)
            merged[f"_{key}"] = np.where(done, end_present, now_present)
        return final_obs, merged

    def _reset_finished(self, obs: np.ndarray, masks: ActionMasks, done: np.ndarray
                        ) -> tuple[np.ndarray, ActionMasks]:
        """DISABLED mode: reset the finished sub-envs and splice their reset observations and masks in."""
        reset_obs, reset_info = self.envs.reset(options={"reset_mask": done.copy()})
        reset_masks = self.masks_from_info(reset_info, rows=done)
        obs = obs.copy()
        obs[done] = np.asarray(reset_obs, np.float32)[done]
        op_slot, flat = masks.op_slot.copy(), masks.flat.copy()
        op_slot[done], flat[done] = reset_masks.op_slot[done], reset_masks.flat[done]
        blueprint = self._splice("blueprint_mask", masks.blueprint, reset_masks.blueprint, done)
        blend = self._splice("blend_mask", masks.blend, reset_masks.blend, done)
        deadline = None
        if masks.keep_deadline is not None and reset_masks.keep_deadline is not None:
            deadline = np.where(done[:, None], reset_masks.keep_deadline, masks.keep_deadline)
        return obs, ActionMasks(op_slot, flat, blueprint, blend, deadline)

    def _splice(self, key: str, now: np.ndarray | None, reset: np.ndarray | None, done: np.ndarray
                ) -> np.ndarray | None:
        """The mask ``key`` (``blueprint_mask`` or ``blend_mask``) with the rows ``done`` taken from ``reset``; a
        missing one allows everything."""
        if now is None and reset is None:
            return None
        allowed = np.ones(self._planting_shape(key), bool)
        spliced = allowed if now is None else now.copy()
        spliced[done] = allowed[done] if reset is None else reset[done]
        return spliced

    def _planting_shape(self, key: str) -> tuple[int, ...]:
        """The shape of ``info["blueprint_mask"]``, or of ``info["blend_mask"]`` (one more axis: the blends)."""
        shape = (self.num_envs, self.num_slots, self.head_sizes[Head.BLUEPRINT])
        return shape if key == "blueprint_mask" else (*shape, self.head_sizes[Head.BLEND])

    def masks_from_info(self, info: dict[str, Any], rows: np.ndarray | None = None) -> ActionMasks:
        """The masks in ``info`` (all values allowed if the env gives none), validated for ``rows``."""
        n, total = self.num_envs, sum(self.head_sizes)
        flat = info.get("action_mask")
        op_slot = info.get("op_slot_mask")
        if flat is None and op_slot is None and not self._warned:
            warnings.warn("the env puts no action_mask/op_slot_mask in info; every action is treated as valid",
                          stacklevel=2)
            self._warned = True
        flat = np.ones((n, total), bool) if flat is None else np.asarray(flat, bool)
        if flat.shape != (n, total):
            raise ValueError(f"info['action_mask'] has shape {flat.shape}; expected {(n, total)}")
        if op_slot is None:  # an env without the joint table: the op mask times the slot marginal
            op_part, slot_part = flat[:, : len(Op)], flat[:, len(Op) : len(Op) + self.num_slots]
            op_slot = op_part[:, :, None] & slot_part[:, None, :]
        op_slot = np.asarray(op_slot, bool)
        if op_slot.shape != (n, len(Op), self.num_slots):
            raise ValueError(f"info['op_slot_mask'] has shape {op_slot.shape}; expected {(n, len(Op), self.num_slots)}")
        masks = ActionMasks(op_slot, flat, self._planting_from_info(info, "blueprint_mask"),
                            self._planting_from_info(info, "blend_mask"), self._keep_deadline_from_info(info))
        self.validate(masks, np.ones(n, bool) if rows is None else rows)
        return masks

    def _planting_from_info(self, info: dict[str, Any], key: str) -> np.ndarray | None:
        """``info[key]`` (``blueprint_mask`` or ``blend_mask``) checked for shape, or None when the env gives none
        (a third-party env: the flat mask's blueprint and blend parts then say everything)."""
        raw = info.get(key)
        if raw is None:
            return None
        mask = np.asarray(raw, bool)
        expected = self._planting_shape(key)
        if mask.shape != expected:
            raise ValueError(f"info['{key}'] has shape {mask.shape}; expected {expected}")
        return mask

    def _keep_deadline_from_info(self, info: dict[str, Any]) -> np.ndarray | None:
        """Where ``info["holding_steps_left"]`` is 1 (a HOLDING seed's last step to be kept), or None when the env
        does not report it."""
        raw = info.get("holding_steps_left")
        if raw is None:
            return None
        left = np.asarray(raw)
        if left.shape != (self.num_envs, self.num_slots):
            raise ValueError(f"info['holding_steps_left'] has shape {left.shape}; expected "
                             f"{(self.num_envs, self.num_slots)}")
        return at_keep_deadline(left)

    def validate(self, masks: ActionMasks, rows: np.ndarray) -> None:
        """Raise unless every sub-env in ``rows`` has a valid op and non-empty masks for the heads it reads."""
        sizes = self.head_sizes
        op_valid = masks.op_slot.any(-1) & masks.flat[:, : sizes[Head.OP]]
        for i in np.flatnonzero(rows & ~op_valid.any(-1)):
            raise ValueError(f"sub-env {i}: the masks allow no op (op_slot_mask rows and action_mask op part "
                             f"{masks.flat[i, : sizes[Head.OP]].tolist()} share no True)")
        offsets = np.cumsum((0, *sizes))
        for head in (Head.BLUEPRINT, Head.BLEND, Head.TEMPO):
            needed = (op_valid & self.relevance[:, head]).any(-1) & rows
            empty = ~masks.flat[:, offsets[head] : offsets[head + 1]].any(-1)
            for i in np.flatnonzero(needed & empty):
                raise ValueError(f"sub-env {i}: action_mask allows no {Head(head).name.lower()} value although "
                                 f"an op that reads it is valid")
        if masks.blueprint is not None:
            self._validate_blueprint(masks, op_valid, offsets, rows)
        if masks.blend is not None:
            self._validate_blend(masks, op_valid, offsets, rows)

    def _validate_blueprint(self, masks: ActionMasks, op_valid: np.ndarray, offsets: np.ndarray,
                            rows: np.ndarray) -> None:
        """Every slot an op that reads the blueprint may target needs a blueprint both masks allow there."""
        readers = op_valid & self.relevance[:, Head.BLUEPRINT]  # (N, num_ops)
        targeted = (masks.op_slot & readers[:, :, None]).any(1)  # (N, num_slots)
        marginal = masks.flat[:, offsets[Head.BLUEPRINT] : offsets[Head.BLUEPRINT + 1]]
        plantable = (masks.blueprint & marginal[:, None, :]).any(-1)
        for i, slot in np.argwhere(targeted & ~plantable & rows[:, None]):
            raise ValueError(f"sub-env {i}: slot {slot} may be germinated but blueprint_mask "
                             f"{masks.blueprint[i, slot].tolist()} and action_mask allow no blueprint there")

    def _validate_blend(self, masks: ActionMasks, op_valid: np.ndarray, offsets: np.ndarray,
                        rows: np.ndarray) -> None:
        """Every blueprint that may be planted in a slot needs a blend both masks allow for it there."""
        readers = op_valid & self.relevance[:, Head.BLEND]  # (N, num_ops)
        targeted = (masks.op_slot & readers[:, :, None]).any(1)  # (N, num_slots)
        plantable = masks.flat[:, None, offsets[Head.BLUEPRINT] : offsets[Head.BLUEPRINT + 1]]  # (N, 1, blueprints)
        if masks.blueprint is not None:
            plantable = plantable & masks.blueprint
        marginal = masks.flat[:, None, None, offsets[Head.BLEND] : offsets[Head.BLEND + 1]]
        blendable = (masks.blend & marginal).any(-1)  # (N, num_slots, num_blueprints)
        stuck = targeted[:, :, None] & plantable & ~blendable & rows[:, None, None]
        for i, slot, blueprint in np.argwhere(stuck):
            raise ValueError(f"sub-env {i}: blueprint {blueprint} may be planted in slot {slot} but blend_mask "
                             f"{masks.blend[i, slot, blueprint].tolist()} and action_mask allow no blend for it")


__all__ = ["VectorEnvDriver", "EnvStep", "TELEMETRY_KEYS", "read_info", "autoreset_mode"]
