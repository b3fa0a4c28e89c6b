"""A small masked, memory-requiring vector env with Esper's action space and info contract.

Episode of ``episode_length`` steps. At t=0 the observation shows a *cue* (one of ``num_slots`` values, one-hot);
afterwards the cue is blank. At the last step the right action is GERMINATE into ``slot = cue`` with
``blueprint = (2 * cue + 1) % 7``: reward 0.5 for the right slot plus 0.5 more for the right blueprint, so the
best return is 1.0 and it needs memory. Before the last step, GERMINATE and FOSSILIZE are masked; ADVANCE is
valid in one random slot (reward 0); PRUNE (from t=1, on a random subset of slots) ends the episode with
``terminated=True`` and reward -0.5, which puts sub-envs out of phase. At the last step ADVANCE and PRUNE are
masked and FOSSILIZE is valid on a random subset (reward 0). An action the masks forbid runs as WAIT and is
flagged ``info["invalid_action"]``; a malformed one raises ``ValueError``.

Observation (``num_slots + 2`` floats in [-1, 1]): cue one-hot (t=0 only), 2 * t / episode_length - 1 (1 only
in a terminal observation after truncation), last-step flag.
Supports the three Gymnasium autoreset modes and ``reset(options={"reset_mask": ...})``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import register, registry
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from esper_env import spaces
from esper_env.spaces import Op

ENV_ID = "EsperToy-v0"
TELEMETRY = ("invalid_action", "executed_op", "val_accuracy", "seed_params", "rollback")


def target_blueprint(cue: np.ndarray) -> np.ndarray:
    return (2 * cue + 1) % len(spaces.BLUEPRINT_NAMES)


class ToyMemoryVectorEnv(VectorEnv):
    def __init__(self, num_envs: int = 4, num_slots: int = 3, episode_length: int = 4,
                 autoreset_mode: str = "NextStep", pbrs_gamma: float = 0.995, pbrs_weight: float = 0.0,
                 max_episode_steps: int | None = None) -> None:
        del max_episode_steps  # the episode length is ours
        self.num_envs, self.num_slots, self.max_epochs = num_envs, num_slots, episode_length
        self.pbrs_gamma, self.pbrs_weight = pbrs_gamma, pbrs_weight
        self.metadata = {"autoreset_mode": AutoresetMode(autoreset_mode), "render_modes": []}
        self.single_action_space = spaces.action_space(num_slots)
        self.single_observation_space = gym.spaces.Box(-1.0, 1.0, (num_slots + 2,), np.float32)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.sizes = spaces.head_sizes(num_slots)
        self.t = np.zeros(num_envs, np.int64)
        self.cue = np.zeros(num_envs, np.int64)
        self.op_slot = np.zeros((num_envs, len(Op), num_slots), bool)
        self.needs_reset = np.zeros(num_envs, bool)
        self.rngs = [np.random.default_rng(i) for i in range(num_envs)]

    # --- episode state --------------------------------------------------------------------------------
    def _reset_rows(self, rows: np.ndarray) -> None:
        for i in np.flatnonzero(rows):
            self.t[i] = 0
            self.cue[i] = self.rngs[i].integers(self.num_slots)
            self.op_slot[i] = self._draw_masks(i)
        self.needs_reset[rows] = False

    def _draw_masks(self, i: int) -> np.ndarray:
        rng, table = self.rngs[i], np.zeros((len(Op), self.num_slots), bool)
        table[Op.WAIT] = True
        if self.t[i] < self.max_epochs - 1:
            table[Op.ADVANCE, rng.integers(self.num_slots)] = True
            if self.t[i] >= 1:
                table[Op.PRUNE] = rng.random(self.num_slots) < 0.5
        else:
            table[Op.GERMINATE] = True
            table[Op.FOSSILIZE] = rng.random(self.num_slots) < 0.5
        return table

    def _obs(self) -> np.ndarray:
        obs = np.zeros((self.num_envs, self.num_slots + 2), np.float32)
        first = self.t == 0
        obs[first, self.cue[first]] = 1.0
        obs[:, -2] = 2.0 * self.t / self.max_epochs - 1.0
        obs[:, -1] = (self.t == self.max_epochs - 1).astype(np.float32)
        return obs

    def _mask_info(self) -> dict[str, Any]:
        flat = np.ones((self.num_envs, sum(self.sizes)), bool)
        flat[:, : len(Op)] = self.op_slot.any(-1)
        return {"action_mask": flat, "op_slot_mask": self.op_slot.copy()}

    # --- Gymnasium API --------------------------------------------------------------------------------
    def reset(self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed if isinstance(seed, int) else None)
        if isinstance(seed, int):  # as a Gymnasium vector env: sub-env i gets seed + i, or its own from a list
            seed = [seed + i for i in range(self.num_envs)]
        if seed is not None:
            self.rngs = [np.random.default_rng(s) for s in seed]
        rows = np.ones(self.num_envs, bool)
        if options and "reset_mask" in options:
            rows = options["reset_mask"]
            if not isinstance(rows, np.ndarray) or rows.dtype != np.bool_ or rows.shape != (self.num_envs,):
                raise ValueError(f"reset_mask must be a bool array of shape ({self.num_envs},)")
        self._reset_rows(rows)
        return self._obs(), self._mask_info()

    def _check_actions(self, actions: Any) -> np.ndarray:
        array = np.asarray(actions)
        if array.shape != (self.num_envs, len(self.sizes)):
            raise ValueError(f"actions has shape {array.shape}; expected {(self.num_envs, len(self.sizes))}")
        if not np.issubdtype(array.dtype, np.integer):
            raise ValueError(f"actions has dtype {array.dtype}; expected integers")
        if (array < 0).any() or (array >= np.asarray(self.sizes)).any():
            raise ValueError(f"actions out of range of nvec {self.sizes}")
        return array.astype(np.int64)

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = self._check_actions(actions)
        mode = self.metadata["autoreset_mode"]
        if mode == AutoresetMode.DISABLED and self.needs_reset.any():
            raise RuntimeError("DISABLED autoreset: reset the finished sub-envs with reset_mask before stepping")
        resetting = self.needs_reset.copy() if mode == AutoresetMode.NEXT_STEP else np.zeros(self.num_envs, bool)
        active = ~resetting
        rows = np.arange(self.num_envs)
        op, slot, blueprint = actions[:, 0], actions[:, 1], actions[:, 2]
        valid = (op == Op.WAIT) | self.op_slot[rows, op, slot]
        executed = np.where(valid, op, Op.WAIT)
        last = self.t == self.max_epochs - 1
        correct_slot = (executed == Op.GERMINATE) & (slot == self.cue) & last
        reward = 0.5 * correct_slot + 0.5 * (correct_slot & (blueprint == target_blueprint(self.cue)))
        terminated = (executed == Op.PRUNE) & active
        reward = np.where(terminated, -0.5, reward) * active
        self.t = self.t + active
        truncated = (self.t >= self.max_epochs) & ~terminated & active
        telemetry = {"invalid_action": ~valid & active, "executed_op": executed,
                     "val_accuracy": np.where(correct_slot, 1.0, 0.5), "seed_params": 100.0 * correct_slot,
                     "rollback": terminated}
        done = terminated | truncated
        self._reset_rows(resetting)
        for i in np.flatnonzero(active & ~done):
            self.op_slot[i] = self._draw_masks(i)
        return self._finish_step(done, reward, terminated, truncated, telemetry)

    def _finish_step(self, done: np.ndarray, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                     telemetry: dict[str, np.ndarray]) -> tuple[Any, ...]:
        mode = self.metadata["autoreset_mode"]
        obs = self._obs()
        info: dict[str, Any] = dict(telemetry)
        if mode == AutoresetMode.SAME_STEP and done.any():
            final_obs = np.full(self.num_envs, None, dtype=object)
            for i in np.flatnonzero(done):
                final_obs[i] = obs[i].copy()
            final_info = {k: v.copy() for k, v in telemetry.items()} | {f"_{k}": done.copy() for k in telemetry}
            final_info |= {k: v for k, v in self._mask_info().items()}
            self._reset_rows(done)
            obs = self._obs()
            info |= {"final_obs": final_obs, "_final_obs": done.copy(), "final_info": final_info,
                     "_final_info": done.copy()}
            info |= {f"_{k}": ~done for k in telemetry}
        else:
            self.needs_reset = done.copy()
        info |= self._mask_info()
        return obs, reward.astype(np.float64), terminated, truncated, info


def make_toy_trainer(mode: str = "NextStep", num_envs: int = 6, steps: int = 12, seed: int = 0,
                     **config: Any) -> Any:
    """A :class:`esper_agent.trainer.Trainer` on this env with small defaults (observation normalisation off, so
    that stored observations are the raw ones)."""
    from esper_agent.config import AgentConfig
    from esper_agent.trainer import Trainer

    envs = gym.make_vec(ENV_ID, num_envs=num_envs, autoreset_mode=mode, episode_length=4)
    cfg = AgentConfig(**({"rollout_steps": steps, "hidden_size": 16, "normalize_obs": False} | config))
    return Trainer(envs, cfg, seed=seed, total_updates=1)


def register_toy() -> None:
    if ENV_ID not in registry:
        register(id=ENV_ID, vector_entry_point=f"{__name__}:ToyMemoryVectorEnv")


register_toy()
