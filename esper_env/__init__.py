"""Esper: a Gymnasium environment for RL-controlled neural-network growth.

``import esper_env`` registers three ids, each with a single-env and a vector entry point::

    gym.make("Esper-CIFAR10-v0")                 # one env (EsperEnv)
    gym.make_vec("Esper-CIFAR10-v0", num_envs=8)  # the native vector env (EsperVectorEnv)
    gym.make("esper_env:Esper-Synthetic-v0")      # works without importing esper_env first

Each id's images are fixed (``dataset`` other than the id's is refused). ``nondeterministic=True`` is what holds
on CUDA; on the CPU a seeded run repeats bit for bit (``esper_env.env_spec`` says why the flag stays True there).
"""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

from esper_env.config import EnvConfig
from esper_env.env_spec import ID_DATASETS

__all__ = ["EnvConfig", "ENV_IDS"]
__version__ = "0.1.0"

# Per-id defaults on top of EnvConfig's; a kwarg given to make() overrides them.
ENV_IDS = {
    "Esper-CIFAR10-v0": {},
    "Esper-CIFAR10-Fast-v0": {"train_images_per_epoch": 10_000, "val_images": 2_000},
    "Esper-Synthetic-v0": {"dataset": "synthetic"},
}

for _env_id, _kwargs in ENV_IDS.items():
    if _env_id not in registry:
        register(
            id=_env_id,
            entry_point=f"esper_env.env:{ID_DATASETS[_env_id]}_env",
            vector_entry_point=f"esper_env.vector_env:{ID_DATASETS[_env_id]}_vector_env",
            nondeterministic=True,  # on CUDA; CPU runs are bit-identical (see the docstring)
            kwargs=dict(_kwargs),
        )
