"""``Sb3VecEnv``: the native Esper vector env behind Stable-Baselines3's ``VecEnv`` API, with action masks.

SB3 cannot take a ``gymnasium.vector.VectorEnv`` (its ``_patch_env`` rejects one, SB3 issues #1568, #1608) and
ships no adapter (its docs ask for a tool-specific one, issue #1745), so this module is that adapter::

    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.vec_env import VecMonitor
    from esper_env.sb3 import make_sb3_env

    env = VecMonitor(make_sb3_env("Esper-Synthetic-v0", num_envs=4, flatten=True))
    model = MaskablePPO("MlpPolicy", env, n_steps=50, seed=0).learn(10_000)

Two action spaces, chosen by ``flatten``:

* ``flatten=True``: ``Discrete(J)`` over :func:`esper_env.wrappers.joint_actions` (199 with 3 slots), through
  :class:`~esper_env.wrappers.FlattenVectorActions`; ``action_masks`` are exact
  (``joint_mask(op_slot_mask, blueprint_mask, blend_mask)``: a GERMINATE past a hard ``param_budget``, gate
  included, is masked too), so MaskablePPO never picks an invalid action.
* ``flatten=False``: the native ``MultiDiscrete([5, num_slots, 7, 3, 3])`` with the flat marginal masks
  ``info["action_mask"]``. MaskablePPO masks each head on its own (sb3-contrib issues #197, #242), so it may pick
  an op/slot pair that no mask forbids on its own; the env executes it as WAIT and flags
  ``info["invalid_action"]``.

Resets. SB3 expects a same-step reset: a finished sub-env's step already returns its next episode's first
observation, the last one goes in ``infos[i]["terminal_observation"]``. :func:`make_sb3_env` builds the native
env with ``autoreset_mode="Disabled"`` and the adapter resets the finished sub-envs itself with
``reset(options={"reset_mask": dones})``: the adapter then owns the whole SB3 contract in one place (which obs is
terminal, which masks are current) and needs no ``final_obs``/``final_info`` unpacking. A native env built with
``autoreset_mode="SameStep"`` is accepted too and gives the same trajectories; ``NextStep`` is refused because
its extra reset step has no place in SB3's API. Seeds from ``seed()`` and options from ``set_options()`` are used
at the next ``reset()`` only, as in SB3's ``DummyVecEnv``; the resets between episodes draw from each sub-env's
own generator, so a seeded run is reproducible.

Horizon. An Esper episode ends by truncation at ``max_epochs``, its fixed horizon, which the observation shows
(its progress feature). ``horizon`` says how the adapter reports that end to SB3; every learner of one comparison
should read it the same way:

* ``horizon="truncated"`` (the default): ``infos[i]["TimeLimit.truncated"]`` is ``True``, as SB3's ``DummyVecEnv``
  over a ``TimeLimit``-wrapped ``gym.Env`` would report it, and SB3's on-policy collection adds
  ``gamma * V(terminal_observation)`` to the episode's last reward (SB3 issue #633): the reading of a time limit
  cut into an endless task. esper_agent's ``AgentConfig(bootstrap_truncation=True)`` reads it so.
* ``horizon="terminal"``: ``TimeLimit.truncated`` is ``False``, so SB3 ends the return at the last reward, as for
  a termination: the task has no future past its horizon, and the critic, never trained on a state past the end,
  could only extrapolate V(final observation) (Pardo et al. 2018, "Time Limits in Reinforcement Learning", treat
  a limit that the state shows as part of the task). esper_agent's default ``bootstrap_truncation=False`` reads it
  so: with the bootstrap, agents on ``Esper-Synthetic-v0`` found growth and lost it again
  (docs/experiments/2026-11-26-agent-learns-to-grow-synthetic.md).

The default is ``"truncated"``, the faithful translation of Gymnasium's flags that SB3 users expect from a
``VecEnv``; ``benchmarks.compare_agents`` passes the reading of its esper_agent arm explicitly. Either way
``terminal_observation`` is set when done, and a real termination (a rollback) is never bootstrapped.

Sub-envs are rows of one native vector env, not separate ``gym.Env`` objects. Hence: ``env_method`` and
``get_attr`` serve ``action_masks`` per sub-env from the latest step, and call (or read) anything else once on the
native env, returning that one result for each requested index; ``set_attr`` sets it on the native env and
refuses a strict subset of indices; ``env_is_wrapped`` is ``False`` for every index because no ``gym.Wrapper``
wraps a row (so wrap the adapter in ``VecMonitor``, which the maskable ``evaluate_policy`` detects on its own).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, get_args

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvStepReturn

from esper_env.masks import at_keep_deadline, defer_keep_flat, early_keeps_as_wait
from esper_env.spaces import Head
from esper_env.wrappers import FlattenVectorActions, defer_keep_joint

MASK_METHOD = "action_masks"  # the name sb3-contrib's get_action_masks and is_masking_supported look up
Horizon = Literal["terminal", "truncated"]
HORIZONS: tuple[str, ...] = get_args(Horizon)
_SAME_STEP_KEYS = ("final_obs", "final_info")  # SameStep's bookkeeping, turned into SB3's terminal_observation


class Sb3VecEnv(VecEnv):
    """SB3 ``VecEnv`` over a native vector env whose info carries ``action_mask`` (and ``op_slot_mask``, optionally
    ``blueprint_mask`` and ``blend_mask``, to flatten).

    Args:
        venv: an :class:`~esper_env.vector_env.EsperVectorEnv` (or a ``VectorEnv`` with the same info keys) built
            with ``autoreset_mode`` ``"Disabled"`` (preferred) or ``"SameStep"``.
        flatten: ``True`` for ``Discrete(J)`` actions with exact joint masks, ``False`` for the native
            ``MultiDiscrete`` actions with the marginal masks.
        horizon: how an episode cut at ``max_epochs`` is reported (module docstring, "Horizon"): ``"truncated"``
            sets ``TimeLimit.truncated`` and SB3 bootstraps its last reward from V(final observation);
            ``"terminal"`` does not, so SB3 ends the return there, as esper_agent does by default.
        defer_keep: the learner's prior of esper_agent's ``AgentConfig.defer_keep``: ``action_masks`` allow
            FOSSILIZE only on a seed at its keep deadline (``info["holding_steps_left"] == 1``,
            :func:`esper_env.masks.deadline_keeps`). Flattened, the joint masks stay exact, and the prior holds
            through them alone (an index they forbid is stepped as the env takes it). On the native heads the op
            head allows FOSSILIZE where some seed is at its deadline, and a FOSSILIZE paired with a slot whose seed
            could still wait is stepped as WAIT (:func:`esper_env.masks.early_keeps_as_wait`), which
            ``info["early_keep_waited"]`` then says. ``info["action_mask"]`` stays the env's own.
    """

    def __init__(self, venv: VectorEnv, flatten: bool = False, horizon: Horizon = "truncated",
                 defer_keep: bool = False) -> None:
        if not isinstance(venv, VectorEnv):
            raise TypeError(f"venv is a {type(venv).__name__}; expected a gymnasium.vector.VectorEnv")
        if horizon not in HORIZONS:
            raise ValueError(f"horizon={horizon!r}; expected one of {HORIZONS}")
        mode = AutoresetMode(venv.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP))
        if mode not in (AutoresetMode.DISABLED, AutoresetMode.SAME_STEP):
            raise ValueError(f"venv has autoreset_mode={mode.value!r}; expected 'Disabled' (make_sb3_env's "
                             "choice) or 'SameStep', because SB3 resets a finished sub-env within the same step")
        self.flatten, self._mode, self.horizon, self.defer_keep = bool(flatten), mode, horizon, bool(defer_keep)
        self.venv: VectorEnv = FlattenVectorActions(venv) if flatten else venv
        space = self.venv.single_action_space
        if not isinstance(space, gym.spaces.Discrete | gym.spaces.MultiDiscrete):
            raise ValueError(f"single action space {space}; expected Discrete or MultiDiscrete (MaskablePPO)")
        width = int(space.n) if isinstance(space, gym.spaces.Discrete) else int(np.sum(space.nvec))
        self._masks = np.ones((venv.num_envs, width), dtype=bool)  # replaced by the first reset's masks
        self._keep_rules: tuple[np.ndarray, np.ndarray] | None = None  # (op_slot, at_deadline) under defer_keep
        self._waited = np.zeros(venv.num_envs, dtype=bool)  # the sub-envs whose early keep this step is a WAIT
        self._actions: np.ndarray | None = None
        super().__init__(venv.num_envs, venv.single_observation_space, space)

    @property
    def vector_env(self) -> VectorEnv:
        """The native (unwrapped) vector env."""
        return self.venv.unwrapped

    # --- reset and step -------------------------------------------------------------------------------------
    def reset(self) -> np.ndarray:
        """Reset every sub-env with the seeds of ``seed()`` and the options of ``set_options()``, then forget them."""
        seeds = None if all(s is None for s in self._seeds) else list(self._seeds)
        obs, info = self.venv.reset(seed=seeds, options=self._reset_options_for_native())
        self.reset_infos = [_row(info, i) for i in range(self.num_envs)]
        self._masks = self._stack_masks(self.reset_infos)
        self._reset_seeds()
        self._reset_options()
        return np.array(obs, dtype=np.float32)

    def _reset_options_for_native(self) -> dict[str, Any] | None:
        # The native env takes one options dict for all sub-envs; SB3 keeps one per sub-env.
        first = self._options[0]
        if any(o != first for o in self._options):
            raise ValueError(f"per-sub-env reset options {self._options}; expected the same dict for every "
                             "sub-env (the native vector env takes one)")
        if "reset_mask" in first:
            raise ValueError(f"reset option reset_mask={first['reset_mask']!r}; expected none: reset() resets "
                             "every sub-env and the adapter resets finished ones itself")
        return dict(first) or None

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions)
        self._waited = np.zeros(self.num_envs, dtype=bool)
        native = (not self.flatten and self._actions.dtype.kind in "iu"
                  and self._actions.shape == (self.num_envs, len(Head)))  # anything else is the env's to refuse
        if self.defer_keep and native and self._keep_rules is not None:
            deferred = early_keeps_as_wait(self._actions, *self._keep_rules)
            self._waited = deferred[:, Head.OP] != self._actions[:, Head.OP]
            self._actions = deferred

    def step_wait(self) -> VecEnvStepReturn:
        if self._actions is None:
            raise RuntimeError("step_wait() called without a pending step_async(actions)")
        actions, self._actions = self._actions, None
        obs, rewards, terminated, truncated, info = self.venv.step(actions)
        obs = np.array(obs, dtype=np.float32)
        terminated, truncated = np.asarray(terminated, dtype=bool), np.asarray(truncated, dtype=bool)
        dones = terminated | truncated
        infos = [_row(info, i) for i in range(self.num_envs)]
        if dones.any():
            terminal = self._reset_finished(obs, info, dones, infos)
        cut = truncated & ~terminated if self.horizon == "truncated" else np.zeros_like(dones)
        for i in range(self.num_envs):
            # Set for every sub-env, as SB3's DummyVecEnv does; PPO bootstraps the value where it is True.
            infos[i]["TimeLimit.truncated"] = bool(cut[i])
            if self.defer_keep:
                infos[i]["early_keep_waited"] = bool(self._waited[i])
            if dones[i]:
                infos[i]["terminal_observation"] = terminal[i]
        self._masks = self._stack_masks(infos)
        return obs, np.asarray(rewards, dtype=np.float32), dones, infos

    def _reset_finished(self, obs: np.ndarray, info: dict[str, Any], dones: np.ndarray,
                        infos: list[dict[str, Any]]) -> list[np.ndarray | None]:
        """Start the next episode of each finished sub-env in place: splice its reset obs into ``obs`` and its
        reset masks into ``infos``; return the terminal observations (``None`` where not done)."""
        if self._mode == AutoresetMode.SAME_STEP:
            # The native env has already reset: obs and the top-level masks are the new episode's; the
            # step's own info and last obs are under final_info / final_obs.
            final_obs, final_info = info["final_obs"], info["final_info"]
            terminal = [np.array(final_obs[i], dtype=np.float32) if done else None for i, done in enumerate(dones)]
            for i in np.flatnonzero(dones):
                infos[i] = {**_row(final_info, i), **infos[i]}
                self.reset_infos[i] = _row(info, i)
            return terminal
        terminal = [obs[i].copy() if done else None for i, done in enumerate(dones)]
        reset_obs, reset_info = self.venv.reset(options={"reset_mask": dones.copy()})
        for i in np.flatnonzero(dones):
            obs[i] = reset_obs[i]
            self.reset_infos[i] = _row(reset_info, i)
            infos[i].update(self.reset_infos[i])  # the next action is chosen under the new episode's masks
        return terminal

    def _stack_masks(self, infos: list[dict[str, Any]]) -> np.ndarray:
        rows = []
        for i, row in enumerate(infos):
            mask = row.get("action_mask")
            if mask is None or np.shape(mask) != self._masks.shape[1:]:
                raise ValueError(f"info['action_mask'] of sub-env {i} is {mask!r}; expected a bool array of shape "
                                 f"{self._masks.shape[1:]} from the native Esper vector env")
            rows.append(np.asarray(mask, dtype=bool))
        masks = np.stack(rows)
        return self._deferred(masks, infos) if self.defer_keep else masks

    def _deferred(self, masks: np.ndarray, infos: list[dict[str, Any]]) -> np.ndarray:
        """``masks`` with FOSSILIZE only at each seed's keep deadline; keeps each sub-env's op/slot mask and
        deadlines for :meth:`step_async`."""
        op_slots, deadlines = [], []
        for i, row in enumerate(infos):
            missing = [k for k in ("op_slot_mask", "holding_steps_left") if k not in row]
            if missing:
                raise ValueError(f"info of sub-env {i} lacks {missing}; defer_keep needs each slot's keep deadline "
                                 "from an Esper env that reports it (or defer_keep=False)")
            op_slot, left = np.asarray(row["op_slot_mask"], dtype=bool), np.asarray(row["holding_steps_left"])
            if left.shape != op_slot.shape[-1:]:
                raise ValueError(f"info['holding_steps_left'] of sub-env {i} has shape {left.shape}; expected "
                                 f"{op_slot.shape[-1:]}, one count per slot")
            op_slots.append(op_slot)
            deadlines.append(at_keep_deadline(left))
        self._keep_rules = (np.stack(op_slots), np.stack(deadlines))
        if self.flatten:
            return defer_keep_joint(masks, self._keep_rules[1])
        return defer_keep_flat(masks, *self._keep_rules)

    # --- masks and attributes -------------------------------------------------------------------------------
    def action_masks(self) -> np.ndarray:
        """The current masks, bool ``(num_envs, J)`` when flattened, else ``(num_envs, sum(nvec))``."""
        return self._masks.copy()

    def has_attr(self, attr_name: str) -> bool:
        if attr_name == MASK_METHOD:
            return True
        try:
            self._native_attr(attr_name)
        except AttributeError:
            return False
        return True

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        targets = self._indices(indices)
        if attr_name == MASK_METHOD:
            return [self._mask_getter(i) for i in targets]
        value = self._native_attr(attr_name)
        return [value for _ in targets]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        targets = self._indices(indices)
        if sorted(targets) != list(range(self.num_envs)):
            raise ValueError(f"set_attr({attr_name!r}) for indices {targets}; expected all {self.num_envs} "
                             "sub-envs, because they share one native vector env")
        setattr(self.venv.unwrapped, attr_name, value)
        if attr_name == "render_mode":
            self.render_mode = value

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        targets = self._indices(indices)
        if method_name == MASK_METHOD:
            return [self._masks[i].copy() for i in targets]
        result = self._native_attr(method_name)(*method_args, **method_kwargs)  # once: it serves every sub-env
        return [result for _ in targets]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        # A sub-env is a row of the native vector env: no gym.Wrapper (Monitor included) can wrap it.
        return [False for _ in self._indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        frames = self.venv.render()
        return [None] * self.num_envs if frames is None else list(frames)

    def close(self) -> None:
        self.venv.close()

    def _mask_getter(self, i: int) -> Callable[[], np.ndarray]:
        return lambda: self._masks[i].copy()

    def _native_attr(self, name: str) -> Any:
        # The outer gymnasium wrapper first (it owns the flattened spaces), then the native env.
        for target in (self.venv, self.venv.unwrapped):
            if hasattr(target, name):
                return getattr(target, name)
        raise AttributeError(f"attribute {name!r} not found; expected {MASK_METHOD!r}, 'render_mode' or an "
                             f"attribute of {type(self.venv.unwrapped).__name__}")

    def _indices(self, indices: VecEnvIndices) -> list[int]:
        targets = [int(i) for i in self._get_indices(indices)]
        bad = [i for i in targets if not 0 <= i < self.num_envs]
        if bad:
            raise ValueError(f"sub-env indices {bad}; expected integers in [0, {self.num_envs})")
        return targets


def _row(info: dict[str, Any], i: int) -> dict[str, Any]:
    """Sub-env ``i``'s view of a Gymnasium vector info dict: each key ``k`` where ``info["_k"][i]`` is set."""
    row: dict[str, Any] = {}
    for key, value in info.items():
        if key.startswith("_") or key in _SAME_STEP_KEYS:
            continue
        present = info.get(f"_{key}")
        if present is not None and not present[i]:
            continue
        item = _row(value, i) if isinstance(value, dict) else value[i]
        row[key] = item.copy() if isinstance(item, np.ndarray) else item
    return row


def make_sb3_env(env_id: str, num_envs: int, flatten: bool, seed: int | None = None,
                 horizon: Horizon = "truncated", defer_keep: bool = False, **env_kwargs: Any) -> Sb3VecEnv:
    """Build ``gym.make_vec(env_id, num_envs, autoreset_mode="Disabled", **env_kwargs)`` behind :class:`Sb3VecEnv`.

    ``seed`` seeds the first ``reset()`` (sub-env ``i`` gets ``seed + i``, SB3's convention); ``horizon`` and
    ``defer_keep`` are :class:`Sb3VecEnv`'s (``"terminal"`` for no bootstrap at ``max_epochs``); ``env_kwargs`` are
    :class:`esper_env.config.EnvConfig` fields and may override ``autoreset_mode`` with ``"SameStep"``.
    """
    venv = gym.make_vec(env_id, num_envs=num_envs, **{"autoreset_mode": "Disabled", **env_kwargs})
    adapter = Sb3VecEnv(venv, flatten=flatten, horizon=horizon, defer_keep=defer_keep)
    if seed is not None:
        adapter.seed(seed)
    return adapter
