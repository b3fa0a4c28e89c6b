"""MaskablePPO training for ``compare_agents``' maskable arms: their configuration (``--sb3-kwargs``), the model
built, or continued from the state a paused run of its slice saved, and trained to the slice's budget in
whole-episode rollouts: SB3 collects a whole rollout even when less of the budget is left, so a budget that is not a
whole number of rollouts ends one rollout past it (``rollout_episodes`` 4 on ``Esper-CIFAR10-v0``, 640 host epochs,
trains 8,320 of a budget of 8,000; the report's table shows what each learner trained).

``--sb3-kwargs`` is a JSON object with any of (:data:`SB3_KWARGS`):

* MaskablePPO's constructor arguments ``learning_rate``, ``ent_coef``, ``n_epochs``, ``gamma``, ``gae_lambda``,
  ``clip_range``, ``vf_coef`` and ``max_grad_norm``, passed as they are (constants: a schedule would read the
  total steps of each one-rollout ``learn`` call, not of the slice);
* ``rollout_episodes`` (default 1): episodes per sub-env in each rollout, so ``n_steps`` is ``rollout_episodes *
  max_epochs`` (a rollout never cuts an episode) and the batch size keeps four minibatches per rollout;
* ``normalize`` (default none): ``"obs"``, ``"reward"`` or ``"both"``: SB3's ``VecNormalize`` around the training
  env (running mean and variance of the observations; rewards scaled by the running std of the discounted return,
  with the model's gamma). Its statistics are saved beside the model (``seed<k>.vecnorm.pkl``) after every update
  and restored with it. Evaluation normalises the native env's observations with the statistics as training left
  them, frozen (``training=False``, ``norm_reward=False``), for argmax and sampled actions alike;
* ``defer_keep`` (``true``; off when left out): esper_agent's ``AgentConfig.defer_keep`` prior for MaskablePPO,
  FOSSILIZE only at a seed's keep deadline, in training (``esper_env.sb3.Sb3VecEnv(defer_keep=True)``) and
  evaluation alike, so that a head-to-head can offer both learners the same prior.

The empty object, the default, is the configuration the maskable arms always had: sb3-contrib's defaults, one
episode per rollout, no normalisation.

A slice's state (:func:`state_paths`) is saved after every update and read back when the same command runs again:
the model continues its network and optimizer (and the normalisation its statistics) on fresh envs, with its env
and action-sampling streams reseeded from (seed, host epochs so far) (its rollouts are whole episodes, so no
episode is cut). The fresh envs' first observations enter the statistics then, as every episode's first does.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.common import env_device
from benchmarks.sb3_actor import Sb3Actor, save_maskable
from benchmarks.slice_state import Paused, Trained, TrainingClock, check_saved_settings
from esper_agent.collect import rollout_seed
from esper_env.config import EnvConfig


def _real(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


NORMALIZE = {"obs": (True, False), "reward": (False, True), "both": (True, True)}  # -> (norm_obs, norm_reward)
# Every key --sb3-kwargs takes: what its value must be, and the check.
SB3_KWARGS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "learning_rate": ("a number > 0", lambda v: _real(v) and v > 0),
    "ent_coef": ("a number >= 0", lambda v: _real(v) and v >= 0),
    "n_epochs": ("an integer >= 1", lambda v: _whole(v) and v >= 1),
    "gamma": ("a number in (0, 1]", lambda v: _real(v) and 0 < v <= 1),
    "gae_lambda": ("a number in [0, 1]", lambda v: _real(v) and 0 <= v <= 1),
    "clip_range": ("a number > 0", lambda v: _real(v) and v > 0),
    "vf_coef": ("a number >= 0", lambda v: _real(v) and v >= 0),
    "max_grad_norm": ("a number > 0", lambda v: _real(v) and v > 0),
    "rollout_episodes": ("an integer >= 1", lambda v: _whole(v) and v >= 1),
    "normalize": (f"null or one of {list(NORMALIZE)}", lambda v: v is None or v in NORMALIZE),
    "defer_keep": ("true (off is the default: leave the key out)", lambda v: v is True),
}
OWN_KWARGS = ("rollout_episodes", "normalize", "defer_keep")  # read here; the rest go to MaskablePPO's constructor


def check_sb3_kwargs(kwargs: Any) -> dict[str, Any]:
    """``kwargs`` (``--sb3-kwargs``, parsed) if every key is one of :data:`SB3_KWARGS` with a valid value."""
    if not isinstance(kwargs, dict):
        raise ValueError(f"{kwargs!r}: expected a JSON object with keys among {list(SB3_KWARGS)}")
    for key, value in kwargs.items():
        if key not in SB3_KWARGS:
            raise ValueError(f"key {key!r} is not one MaskablePPO's arms take; expected keys among {list(SB3_KWARGS)}")
        expected, valid = SB3_KWARGS[key]
        if not valid(value):
            raise ValueError(f"{key}={value!r}: expected {expected}")
    return dict(kwargs)


def model_kwargs(kwargs: dict[str, Any], max_epochs: int, num_envs: int) -> dict[str, Any]:
    """MaskablePPO's constructor arguments for ``kwargs``: ``n_steps`` of whole episodes, the batch size, and the
    constructor's own keys of ``kwargs``."""
    n_steps = kwargs.get("rollout_episodes", 1) * max_epochs
    # Four minibatches per rollout, at least two samples each: a minibatch of one has no advantage std (NaN).
    batch = max(2, n_steps * num_envs // 4)
    return {"n_steps": n_steps, "batch_size": batch} | {k: v for k, v in kwargs.items() if k not in OWN_KWARGS}


def resolved_config(kwargs: dict[str, Any], max_epochs: int, num_envs: int) -> dict[str, Any]:
    """Every hyperparameter ``kwargs`` may set, as the model gets it (MaskablePPO's defaults where not given),
    and the normalisation: what a slice records beside the kwargs given."""
    from sb3_contrib import MaskablePPO

    defaults = inspect.signature(MaskablePPO.__init__).parameters
    given = model_kwargs(kwargs, max_epochs, num_envs)
    taken = [k for k in SB3_KWARGS if k not in OWN_KWARGS]
    return ({k: given.get(k, defaults[k].default) for k in taken}
            | {"n_steps": given["n_steps"], "batch_size": given["batch_size"], "normalize": kwargs.get("normalize")}
            | ({"defer_keep": True} if kwargs.get("defer_keep") else {}))  # off: absent, as before the option


def state_paths(seed: int, folder: Path) -> list[Path]:
    """The files that hold a maskable slice's training state between runs: the model; its curve and settings; and
    the statistics of its observation/reward normalisation, if it has one. Saved curve first, model last, so a
    model whose host epochs match the curve's was saved with that curve and those statistics."""
    return [folder / f"seed{seed}.sb3.zip", folder / f"seed{seed}.curve.json", folder / f"seed{seed}.vecnorm.pkl"]


def normalized(env: Any, kwargs: dict[str, Any]) -> Any:
    """``env`` in SB3's ``VecNormalize`` as ``kwargs["normalize"]`` says (with the gamma the model gets), else as
    it is."""
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.vec_env import VecNormalize

    if kwargs.get("normalize") is None:
        return env
    norm_obs, norm_reward = NORMALIZE[kwargs["normalize"]]
    gamma = kwargs.get("gamma", inspect.signature(MaskablePPO.__init__).parameters["gamma"].default)
    return VecNormalize(env, norm_obs=norm_obs, norm_reward=norm_reward, gamma=gamma)


def load_normalized(saved_norm: Path, env: Any) -> Any:
    """The ``VecNormalize`` a paused run saved, statistics and all, around ``env``."""
    from stable_baselines3.common.vec_env import VecNormalize

    if not saved_norm.exists():
        raise ValueError(f"{saved_norm} is missing beside the model of a slice trained with normalisation (a save "
                         "was cut short); delete that slice's saved state to start it over")
    return VecNormalize.load(str(saved_norm), env)


def frozen(env: Any) -> Any:
    """The training env's ``VecNormalize``, frozen for evaluation (its statistics no longer move, rewards are not
    scaled); ``None`` if training did not normalise."""
    from stable_baselines3.common.vec_env import VecNormalize

    if not isinstance(env, VecNormalize):
        return None
    env.training, env.norm_reward = False, False
    return env


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


def _resume(paths: list[Path], env: Any, settings: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The model a paused run saved, on ``env`` (normalised with the saved statistics if it was), and its curve
    record, checked against this run's settings."""
    from sb3_contrib import MaskablePPO

    saved, saved_curve, saved_norm = paths
    if not saved_curve.exists():
        raise ValueError(f"{saved} has no {saved_curve.name} beside it (a save was cut short); delete "
                         f"{saved.name} to start that slice over")
    record = json.loads(saved_curve.read_text())
    # a state saved without the key was trained under the empty configuration, the only one it could have had
    check_saved_settings(saved, {"sb3_kwargs": {}} | record["settings"], settings)
    if settings["sb3_kwargs"].get("normalize") is not None:
        env = load_normalized(saved_norm, env)
    model = MaskablePPO.load(saved, env=env, device="cpu")
    if model.num_timesteps != record["host_epochs"]:
        raise ValueError(f"{saved} is at {model.num_timesteps} host epochs but {saved_curve.name} at "
                         f"{record['host_epochs']} (a save was cut short); delete both to start over")
    return model, record


def train_maskable(args: argparse.Namespace, seed: int, folder: Path, settings: dict[str, Any],
                   config: EnvConfig) -> Trained:
    """Train (or continue) the maskable arm ``settings["arm"]`` for ``args.budget_epochs`` host epochs; its argmax
    actor and, for ``--eval-sampled``, its sampling actor. Raises :class:`Paused` at ``--time-limit-s`` (or before an
    evaluation that ``--eval-reserve-s`` says would overrun it)."""
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.vec_env import VecMonitor

    from esper_env.sb3 import make_sb3_env

    name, kwargs = settings["arm"], settings["sb3_kwargs"]
    flatten = name == "maskable_flat"
    paths = state_paths(seed, folder)
    saved, saved_curve, saved_norm = paths
    curve: list[dict] = []
    clock = TrainingClock(args.time_limit_s, eval_reserve_s=args.eval_reserve_s, device=env_device(args.env_kwargs))
    # VecMonitor inside the normalisation: the curve's returns are the env's own
    defer_keep = kwargs.get("defer_keep", False)
    env = VecMonitor(make_sb3_env(args.env, args.num_envs, flatten, horizon=settings["horizon"], defer_keep=defer_keep,
                                  **args.env_kwargs))
    if saved.exists():
        model, record = _resume(paths, env, settings)
        curve = record["curve"]
        clock.resume(record["train_seconds"], record.get("runs", []), model.num_timesteps)
        print(f"{name} seed {seed}: continues from {model.num_timesteps} host epochs", flush=True)
    else:
        model = MaskablePPO("MlpPolicy", normalized(env, kwargs), seed=seed, device="cpu", verbose=0,
                            **model_kwargs(kwargs, config.max_epochs, args.num_envs))
    env, norm_at = model.get_env(), saved_norm if kwargs.get("normalize") is not None else None
    # Reseed everything but the initial weights (env resets, action sampling) from a hash of (seed, host epochs
    # so far), as esper_agent's rollouts are: seed k + i as reset seeds would give seed k+1 all but one of seed
    # k's sub-env streams, and a continued run would replay its first episodes and its first sampled actions.
    model.set_random_seed(rollout_seed(seed, model.num_timesteps))
    while model.num_timesteps < args.budget_epochs:
        # One rollout and its update per call: reset_num_timesteps=False continues the count and the episodes.
        # Each call sees a total of (count so far + one rollout), which would matter for a scheduled learning
        # rate or clip range; the ones --sb3-kwargs takes are constant.
        model.learn(total_timesteps=min(model.n_steps * args.num_envs, args.budget_epochs - model.num_timesteps),
                    callback=_curve_callback(curve), reset_num_timesteps=False)
        save_maskable(model, saved, saved_curve, {"curve": curve, "host_epochs": model.num_timesteps,
                                                   "settings": settings} | clock.saved(model.num_timesteps),
                      saved_norm=norm_at)
        clock.step_done()
        if model.num_timesteps < args.budget_epochs and clock.no_time_for_another_step():
            env.close()
            raise Paused(f"{name} seed {seed}: paused at {model.num_timesteps}/{args.budget_epochs} host "
                         f"epochs (the last rollout took {clock.last_step_s:.0f} s); state in {saved}")
    env.close()
    clock.pause_unless_evaluation_fits(f"{name} seed {seed}", saved)
    actor = partial(Sb3Actor, model, flatten, config.num_slots, obs_norm=frozen(env), defer_keep=defer_keep)
    return Trained(actor(), curve, clock.total_s(), sampled_actor=actor(deterministic=False, seed=seed),
                   training_runs=clock.runs(model.num_timesteps))
