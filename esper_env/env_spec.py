"""What the registered ids promise and what ``env.spec`` says about an Esper env (single or vector face).

* Each id names its images: ``Esper-Synthetic-v0`` generates them, the ``Esper-CIFAR10`` ids read CIFAR-10. The
  entry points check ``dataset`` against the id before anything is loaded, so
  ``gym.make("Esper-Synthetic-v0", dataset="cifar10")`` is refused instead of quietly downloading CIFAR-10.
* ``gym.make`` and ``gym.make_vec`` give the env a minimal spec after building it; the envs replace it with
  :func:`describe`: ``max_episode_steps`` is the episode length (``max_epochs``) and the kwargs are plain JSON
  values, so ``spec.to_json()`` works whatever numpy scalars or enums the caller passed.
* ``nondeterministic=True``: on CUDA (bf16 autocast, cuDNN autotuning, atomic reductions) runs with the same seed
  agree only statistically. On the CPU a seeded run repeats bit for bit (same machine, torch version and thread
  count; tested), yet the flag stays True there too: with False, Gymnasium's ``check_env`` compares two steps'
  infos exactly, and the NaN that ``info["contribution"]`` holds for an unmeasured slot never equals itself.
* Gymnasium's own ``max_episode_steps`` adds a ``TimeLimit`` that would cut an episode before its host has
  finished training (the learning rate's cosine schedule runs over ``max_epochs``). The vector env refuses one
  that differs from ``max_epochs`` (:func:`check_episode_steps`); ``gym.make`` applies it outside the env, where
  the env cannot see it, so it is documented on :class:`esper_env.env.EsperEnv` instead.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gymnasium.envs.registration import EnvSpec

from esper_env.config import DATASETS, EnvConfig

ID_DATASETS = {"Esper-CIFAR10-v0": "cifar10", "Esper-CIFAR10-Fast-v0": "cifar10", "Esper-Synthetic-v0": "synthetic"}
"""The images each registered id stands for."""

_FIELDS = {f.name for f in dataclasses.fields(EnvConfig)}


def id_kwargs(dataset: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` of an id whose images are ``dataset``, with ``dataset`` set; refuses another dataset (a value that
    is no dataset at all is left for the config to refuse, by type or range)."""
    given = kwargs.get("dataset", dataset)
    if given != dataset and isinstance(given, str) and given in DATASETS:
        ids = sorted(i for i, d in ID_DATASETS.items() if d == given)
        instead = f"; for {given!r} images use {ids}" if ids else ""
        raise ValueError(f"dataset={given!r} contradicts the env id, whose images are {dataset!r}; expected "
                         f"dataset={dataset!r} or no dataset argument{instead}")
    return {"dataset": dataset, **kwargs}


def check_episode_steps(max_episode_steps: Any, cfg: EnvConfig) -> None:
    """Refuse a ``max_episode_steps`` other than the episode length (``None`` or ``max_epochs`` pass)."""
    if max_episode_steps is not None and max_episode_steps != cfg.max_epochs:
        raise ValueError(f"max_episode_steps={max_episode_steps!r} differs from the episode length "
                         f"max_epochs={cfg.max_epochs}; expected None or {cfg.max_epochs}: to change the episode "
                         "length, set max_epochs")


def describe(spec: EnvSpec | None, cfg: EnvConfig) -> EnvSpec | None:
    """``spec`` made true for an env built from ``cfg``: its episode length, and plain JSON kwargs."""
    if spec is None:
        return None
    kwargs = {key: _json(getattr(cfg, key)) if key in _FIELDS else value for key, value in spec.kwargs.items()}
    return dataclasses.replace(spec, kwargs=kwargs, max_episode_steps=cfg.max_epochs)


class SpecAttribute:
    """The ``spec`` attribute of both faces: what ``gym.make`` or ``gym.make_vec`` assigns is stored made true
    for the env's ``config`` (:func:`describe`); None until one is assigned."""

    def __get__(self, env: Any, owner: type | None = None) -> Any:
        if env is None:  # looked up on the class: the attribute itself, so that help() finds this docstring
            return self
        return env.__dict__.get("_spec")

    def __set__(self, env: Any, value: EnvSpec | None) -> None:
        env.__dict__["_spec"] = describe(value, env.config)


def _json(value: Any) -> Any:
    """A config value (plain Python, see ``EnvConfig``) as JSON holds it: tuples as lists."""
    return list(value) if isinstance(value, tuple) else value
