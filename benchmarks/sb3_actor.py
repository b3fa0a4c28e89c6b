"""A trained Stable-Baselines3 model (MaskablePPO) as an :class:`~esper_agent.baselines.Actor` on the native env,
so that the head-to-head evaluates it with the same episode driver as every other arm; and its save between the
runs of a slice (:func:`save_maskable`), with its observation/reward normalisation's statistics if it has one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import write_json
from esper_agent.distributions import ActionMasks
from esper_env.masks import defer_keep_flat, early_keeps_as_wait
from esper_env.wrappers import defer_keep_joint, joint_actions, joint_masks


class Sb3Actor:
    """``model`` acting on the native env: flat joint indices (``flatten``, exact masks) mapped back to the heads,
    or MultiDiscrete heads (marginal masks) as they are.

    Argmax actions by default. With ``deterministic=False`` it samples, and each step's draw comes from a torch
    stream seeded by (``seed``, step) inside ``torch.random.fork_rng``: SB3 samples from torch's global stream,
    which training left in a state that depends on where a run was paused, and drawing from it here would also
    shift the draws of anything that runs later. The model must be on the CPU (compare_agents trains it there):
    only the CPU stream is forked.

    ``obs_norm``: the ``VecNormalize`` the model was trained in, frozen (``training=False``): the native env's
    observations reach the model normalised as in training, and acting does not move the statistics.

    ``defer_keep``: the model trained under ``Sb3VecEnv(defer_keep=True)`` acts under the same masks (FOSSILIZE
    only at a seed's keep deadline) and, on the native heads, the same early keeps stepped as WAIT."""

    def __init__(self, model: Any, flatten: bool, num_slots: int, deterministic: bool = True, seed: int = 0,
                 obs_norm: Any = None, defer_keep: bool = False) -> None:
        if obs_norm is not None and obs_norm.training:
            raise ValueError("obs_norm is still training (its statistics would move with every evaluation step); "
                             "expected a frozen VecNormalize (training=False)")
        self.model, self.flatten, self.table = model, flatten, joint_actions(num_slots)
        self.deterministic, self.seed, self.steps, self.obs_norm = deterministic, seed, 0, obs_norm
        self.defer_keep = defer_keep

    def reset(self, num_envs: int) -> None:
        del num_envs

    def act(self, obs: np.ndarray, masks: ActionMasks, episode_start: np.ndarray) -> np.ndarray:
        flat = self._model_masks(masks)
        if self.obs_norm is not None:
            obs = self.obs_norm.normalize_obs(obs)
        if self.deterministic:
            actions, _ = self.model.predict(obs, action_masks=flat, deterministic=True)
        else:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed * 1_000_003 + self.steps)
                actions, _ = self.model.predict(obs, action_masks=flat, deterministic=False)
            self.steps += 1
        if self.flatten:
            return self.table[actions]
        if self.defer_keep:
            return early_keeps_as_wait(actions, np.asarray(masks.op_slot), self._deadlines(masks))
        return np.asarray(actions, dtype=np.int64)

    def _model_masks(self, masks: ActionMasks) -> np.ndarray:
        """The masks the model reads: exact joint ones (flattened) or the per-head marginals, narrowed as in
        training under ``defer_keep``."""
        if self.flatten:
            joint = joint_masks(masks.op_slot, masks.blueprint, masks.blend)
            return defer_keep_joint(joint, self._deadlines(masks)) if self.defer_keep else joint
        flat = np.asarray(masks.flat)
        return defer_keep_flat(flat, masks.op_slot, self._deadlines(masks)) if self.defer_keep else flat

    @staticmethod
    def _deadlines(masks: ActionMasks) -> np.ndarray:
        if masks.keep_deadline is None:
            raise ValueError("defer_keep needs each slot's keep deadline (info['holding_steps_left']), which this "
                             "env does not report; expected an Esper env")
        return np.asarray(masks.keep_deadline, dtype=bool)


def save_maskable(model: Any, saved: Path, saved_curve: Path, record: dict[str, Any],
                  saved_norm: Path | None = None) -> None:
    """The model and its curve, each through a temporary file (the model's host-epoch count ties them); with
    ``saved_norm``, the statistics of the model's ``VecNormalize`` env too, between the two, so that a model saved
    whole was saved after them."""
    write_json(saved_curve, record, indent=None)
    if saved_norm is not None:
        norm_tmp = saved_norm.with_name(f"{saved_norm.name}.tmp")
        model.get_vec_normalize_env().save(str(norm_tmp))
        norm_tmp.replace(saved_norm)
    tmp = saved.with_name(f"{saved.stem}.tmp.zip")
    model.save(tmp)
    tmp.replace(saved)
