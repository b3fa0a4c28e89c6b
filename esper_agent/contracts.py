"""What the trainer requires of the env, checked before training starts.

The settings that matter here (the PBRS discount, the episode length) belong to the env, and a Gymnasium vector env
shows them in one of two ways: a native vector env (Esper's own ``gym.make_vec`` default, or any ``VectorEnv``
that runs its sub-envs itself) has them as attributes, while ``SyncVectorEnv`` and ``AsyncVectorEnv`` hold
wrapped single envs whose attributes only ``get_attr`` reaches. :func:`env_setting` reads both, and says so when
it cannot, so that a check never passes on a default it made up.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import gymnasium as gym

from esper_agent.distributed import SingleProcess
from esper_agent.envs import VectorEnvDriver
from esper_env.spaces import observation_layout


class SettingNotFound(LookupError):
    """The vector env exposes no such setting, neither itself nor through its sub-envs."""


def _from_sub_envs(envs: Any, name: str) -> tuple[Any, ...] | None:
    """``name`` from every sub-env through ``get_attr``, or None when no sub-env has it. The presence test comes
    first because a failed ``get_attr`` on an ``AsyncVectorEnv`` shuts the failing worker down."""
    present = envs.call("has_wrapper_attr", name)
    if not any(present):
        return None
    if not all(present):
        raise ValueError(f"only sub-envs {[i for i, p in enumerate(present) if p]} of {len(present)} have "
                         f"{name!r}; expected every sub-env to be configured alike")
    return tuple(envs.get_attr(name))


def env_setting(envs: gym.vector.VectorEnv, name: str) -> Any:
    """The value of the env setting ``name``: an attribute of the vector env or of its ``config``, else (for
    Gymnasium's sync and async vector envs) of every sub-env or of every sub-env's ``config``. Raises
    :class:`SettingNotFound` when none of these has it, and ``ValueError`` when sub-envs disagree (one agent
    cannot match two values)."""
    base = envs.unwrapped
    for source in (base, getattr(base, "config", None)):
        if source is not None and hasattr(source, name):
            return getattr(source, name)
    if not callable(getattr(base, "call", None)) or not callable(getattr(base, "get_attr", None)):
        raise SettingNotFound(f"the vector env {type(base).__name__} has no attribute {name!r} and no get_attr")
    values = _from_sub_envs(base, name)
    if values is None:
        configs = _from_sub_envs(base, "config")
        if configs is None or not all(hasattr(c, name) for c in configs):
            raise SettingNotFound(f"neither the vector env {type(base).__name__} nor its sub-envs have {name!r}")
        values = tuple(getattr(c, name) for c in configs)
    if any(v != values[0] for v in values[1:]):
        raise ValueError(f"the sub-envs disagree on {name}: {list(values)}; expected one value for all of them")
    return values[0]


def _spec_kwargs(envs: gym.vector.VectorEnv) -> dict[str, Any]:
    spec = getattr(envs, "spec", None) or getattr(envs.unwrapped, "spec", None)
    return dict(getattr(spec, "kwargs", None) or {})


def check_gamma_contract(envs: gym.vector.VectorEnv, gamma: float) -> None:
    """Refuse to train when the env shapes rewards with a PBRS discount other than the agent's gamma.

    Potential-based shaping leaves the optimal policy unchanged only if its discount equals the learner's
    (Ng et al. 1999); with another discount it adds a bias the agent would silently optimise. An env that has no
    ``pbrs_weight`` (a third-party env) shapes nothing, unless its spec was given PBRS settings that then cannot
    be read: that is refused rather than assumed away.
    """
    try:
        weight = float(env_setting(envs, "pbrs_weight"))
    except SettingNotFound as missing:
        given = sorted(k for k in _spec_kwargs(envs) if k.startswith("pbrs_"))
        if given:
            raise ValueError(f"the env was made with {given} but the agent cannot read them back ({missing}); "
                             "expected the vector env, or each sub-env through get_attr, to expose pbrs_weight "
                             "and pbrs_gamma") from missing
        return
    if weight == 0.0:
        return
    try:
        pbrs_gamma: float | None = float(env_setting(envs, "pbrs_gamma"))
    except SettingNotFound:
        pbrs_gamma = None
    if pbrs_gamma is None or not math.isclose(pbrs_gamma, gamma, rel_tol=0.0, abs_tol=1e-12):
        raise ValueError(f"the env shapes rewards with pbrs_weight={weight} and pbrs_gamma={pbrs_gamma}, but the "
                         f"agent's gamma is {gamma}; set AgentConfig.gamma (--gamma) to {pbrs_gamma} or make the "
                         "env use pbrs_gamma equal to the agent's gamma (or pbrs_weight=0)")


def episode_length(envs: gym.vector.VectorEnv) -> int | None:
    """The env's episode length (``max_epochs``), or None when the env does not say."""
    try:
        value = env_setting(envs, "max_epochs")
    except (SettingNotFound, ValueError):
        return None
    return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else None


def check_imitation_possible(imitation_updates: int, driver: VectorEnvDriver, ranks: SingleProcess) -> None:
    """Refuse imitation where its teacher cannot run: under torchrun, or on observations that are not Esper's
    (the heuristic reads Esper's observation layout)."""
    if ranks.world_size > 1:
        raise ValueError(f"imitation_updates={imitation_updates} is for one process; this run has "
                         f"{ranks.world_size} ranks (set imitation_updates=0 or run without torchrun)")
    esper_obs_dim = sum(f.size for f in observation_layout(driver.num_slots))
    if driver.obs_dim != esper_obs_dim:
        raise ValueError(f"imitation_updates={imitation_updates} needs Esper's observations (the heuristic teacher "
                         f"reads their layout: {esper_obs_dim} values for {driver.num_slots} slots); this env's have "
                         f"{driver.obs_dim}")


__all__ = ["SettingNotFound", "check_gamma_contract", "check_imitation_possible", "env_setting", "episode_length"]
