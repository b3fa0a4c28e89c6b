"""MaskablePPO training for ``compare_agents``' maskable arms: the model built, or continued from the state a
paused run of its slice saved, and trained to the slice's budget in whole-episode rollouts.

A slice's state (:func:`state_paths`) is saved after every update and read back when the same command runs again:
the model continues its network and optimizer on fresh envs, with its env and action-sampling streams reseeded from
(seed, host epochs so far) (its rollouts are whole episodes, so no episode is cut).
"""

from __future__ import annotations

import argparse
import json
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.sb3_actor import Sb3Actor, save_maskable
from benchmarks.slice_state import Paused, Trained, TrainingClock, check_saved_settings
from esper_agent.collect import rollout_seed
from esper_env.config import EnvConfig


def state_paths(seed: int, folder: Path) -> list[Path]:
    """The files that hold a maskable slice's training state between runs: the model, then its curve and settings
    (saved first; host epochs tie the two)."""
    return [folder / f"seed{seed}.sb3.zip", folder / f"seed{seed}.curve.json"]


def _curve_callback(curve: list[dict]) -> Any:
    """An SB3 callback that appends each finished training episode to ``curve`` (host epochs, val accuracy,
    return); built here so that importing this module does not import SB3."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Curve(BaseCallback):
        def _on_step(self) -> bool:
            for info, done in zip(self.locals["infos"], self.locals["dones"], strict=True):
                if done and "episode" in info:
                    curve.append({"host_epochs": self.num_timesteps, "final_accuracy": info.get("val_accuracy"),
                                  "return": float(info["episode"]["r"])})
            return True

    return Curve()


def _resume(saved: Path, saved_curve: Path, env: Any, settings: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The model a paused run saved, on ``env``, and its curve record, checked against this run's settings."""
    from sb3_contrib import MaskablePPO

    if not saved_curve.exists():
        raise ValueError(f"{saved} has no {saved_curve.name} beside it (a save was cut short); delete "
                         f"{saved.name} to start that slice over")
    record = json.loads(saved_curve.read_text())
    check_saved_settings(saved, record["settings"], settings)
    model = MaskablePPO.load(saved, env=env, device="cpu")
    if model.num_timesteps != record["host_epochs"]:
        raise ValueError(f"{saved} is at {model.num_timesteps} host epochs but {saved_curve.name} at "
                         f"{record['host_epochs']} (a save was cut short); delete both to start over")
    return model, record


def train_maskable(args: argparse.Namespace, seed: int, folder: Path, settings: dict[str, Any],
                   config: EnvConfig) -> Trained:
    """Train (or continue) the maskable arm ``settings["arm"]`` for ``args.budget_epochs`` host epochs; its argmax
    actor and, for ``--eval-sampled``, its sampling actor. Raises :class:`Paused` at ``--time-limit-s``."""
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.vec_env import VecMonitor

    from esper_env.sb3 import make_sb3_env

    name = settings["arm"]
    flatten = name == "maskable_flat"
    saved, saved_curve = state_paths(seed, folder)
    curve: list[dict] = []
    clock = TrainingClock(args.time_limit_s)
    env = VecMonitor(make_sb3_env(args.env, args.num_envs, flatten, horizon=settings["horizon"], **args.env_kwargs))
    steps = config.max_epochs
    if saved.exists():
        model, record = _resume(saved, saved_curve, env, settings)
        curve, clock.earlier_s = record["curve"], record["train_seconds"]
        print(f"{name} seed {seed}: continues from {model.num_timesteps} host epochs", flush=True)
    else:
        # Four minibatches per rollout, at least two samples each: a minibatch of one has no advantage std (NaN).
        batch = max(2, steps * args.num_envs // 4)
        model = MaskablePPO("MlpPolicy", env, n_steps=steps, batch_size=batch, seed=seed, device="cpu", verbose=0)
    # Reseed everything but the initial weights (env resets, action sampling) from a hash of (seed, host epochs
    # so far), as esper_agent's rollouts are: seed k + i as reset seeds would give seed k+1 all but one of seed
    # k's sub-env streams, and a continued run would replay its first episodes and its first sampled actions.
    model.set_random_seed(rollout_seed(seed, model.num_timesteps))
    while model.num_timesteps < args.budget_epochs:
        # One rollout and its update per call: reset_num_timesteps=False continues the count and the episodes.
        # Each call sees a total of (count so far + one rollout), which would matter for a scheduled learning
        # rate or clip range; MaskablePPO's defaults used here are constant.
        model.learn(total_timesteps=min(steps * args.num_envs, args.budget_epochs - model.num_timesteps),
                    callback=_curve_callback(curve), reset_num_timesteps=False)
        save_maskable(model, saved, saved_curve, {"curve": curve, "train_seconds": clock.total_s(),
                                                   "host_epochs": model.num_timesteps, "settings": settings})
        if model.num_timesteps < args.budget_epochs and clock.out_of_time():
            env.close()
            raise Paused(f"{name} seed {seed}: paused at {model.num_timesteps}/{args.budget_epochs} host "
                         f"epochs; state in {saved}")
    env.close()
    actor = partial(Sb3Actor, model, flatten, config.num_slots)
    return Trained(actor(), curve, clock.total_s(), sampled_actor=actor(deterministic=False, seed=seed))
