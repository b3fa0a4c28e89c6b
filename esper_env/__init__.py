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

__all__ = ["EnvConfig", "ENV_IDS", "FAMILY_TASK", "SMALL_TASK"]
__version__ = "0.1.0"

FAMILY_TASK = {
    "host": "family", "condition": "mixture", "max_epochs": 20, "lr_schedule": "wsd", "host_lr": 0.2, "seed_lr": 0.4,
    "label_smoothing": 0.2, "crop_pad": 2, "param_penalty": 0.0, "flops_price": 0.02, "params_price": 0.01,
    "min_training_epochs": 1, "one_seed_incubating": False, "test_flip": True, "ema_epochs": 1.0,
}
"""The task, version 2 (``GROWTH.md``): the growable family host from its seedling, on the hidden condition
mixture, 20 epochs under the fast recipe the growth probes measured (warm-up-stable-decay set per batch, at a
peak of 0.2 per batch of 512, label smoothing 0.2, 2-pixel translations, flip test-time augmentation on the test
read; validation and test read a moving average of the weights over about one epoch, which cuts one step's
validation noise from 0.76 to 0.14 points at the same test accuracy (``benchmarks/results/screen_probe/ema/``);
seeds at twice the host's rate, the probes' boost for late arrivals), each doubling of training FLOPs over
the static seedling's priced at 2 points of accuracy and each doubling of parameters at 1
(``benchmarks/results/grow_cost/oracle.md``). Every family seed keeps the function at birth and so trains at
full amplitude from its germination (``lifecycle.blends_at_birth``); its timers (one epoch's incubation, a ramp
already complete) let it join three epochs after its germination, and several slots may grow at once."""

SMALL_TASK = {key: EnvConfig.__dataclass_fields__[key].default for key in FAMILY_TASK}
"""Keyword arguments that give the CIFAR-10 ids back the task before version 2 (the small host with seeds that
stay in their slots, one training condition, 25 epochs, cosine schedule): what every result committed before
version 2 ran, e.g. ``gym.make("Esper-CIFAR10-Fast-v0", **esper_env.SMALL_TASK, ...)``."""

# Per-id defaults on top of EnvConfig's; a kwarg given to make() overrides them.
ENV_IDS = {
    "Esper-CIFAR10-v0": dict(FAMILY_TASK),
    "Esper-CIFAR10-Fast-v0": {**FAMILY_TASK, "train_images_per_epoch": 10_000, "val_images": 2_000},
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
