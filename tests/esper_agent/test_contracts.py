"""What the trainer checks about the env before training: reading env settings through every kind of vector env,
and the PBRS discount contract."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)
from gymnasium.envs.registration import EnvSpec

from esper_agent.config import AgentConfig
from esper_agent.contracts import SettingNotFound, check_gamma_contract, env_setting, episode_length
from esper_agent.trainer import Trainer

SMALL = {"max_epochs": 4, "device": "cpu", "synthetic_train_size": 64, "synthetic_val_size": 32}
AGENT = {"rollout_steps": 4, "hidden_size": 16, "num_minibatches": 1}


def sync_envs(**kwargs: Any) -> gym.vector.VectorEnv:
    return gym.make_vec("Esper-Synthetic-v0", num_envs=2, vectorization_mode="sync", **(SMALL | kwargs))


def test_a_sync_vector_env_with_another_pbrs_gamma_is_refused() -> None:
    """Gymnasium's SyncVectorEnv has no pbrs_gamma of its own: the sub-envs' value must be read, not a default."""
    shaped = sync_envs(pbrs_weight=0.5, pbrs_gamma=0.9)
    with pytest.raises(ValueError, match=r"pbrs_weight=0.5 and pbrs_gamma=0.9, but the agent's gamma is 0.995"):
        Trainer(shaped, AgentConfig(**AGENT))
    Trainer(shaped, AgentConfig(gamma=0.9, **AGENT))  # the same discount: fine
    Trainer(sync_envs(pbrs_weight=0.0, pbrs_gamma=0.9), AgentConfig(**AGENT))  # no shaping: gamma is free


def test_settings_are_read_from_the_native_env_and_through_get_attr() -> None:
    native = gym.make_vec("Esper-Synthetic-v0", num_envs=2, pbrs_gamma=0.9, **SMALL)
    for envs in (native, sync_envs(pbrs_gamma=0.9)):
        assert env_setting(envs, "pbrs_gamma") == 0.9
        assert env_setting(envs, "max_epochs") == 4  # a field of the env's config, not an attribute
        assert episode_length(envs) == 4
        with pytest.raises(SettingNotFound, match="no_such_setting"):
            env_setting(envs, "no_such_setting")


def test_an_async_vector_env_survives_a_setting_its_sub_envs_lack() -> None:
    """A failed get_attr shuts an AsyncVectorEnv's worker down: the reader asks whether the attribute exists first."""
    envs = gym.make_vec("Esper-Synthetic-v0", num_envs=2, vectorization_mode="async", pbrs_gamma=0.9, **SMALL)
    try:
        with pytest.raises(SettingNotFound):
            env_setting(envs, "no_such_setting")
        assert env_setting(envs, "pbrs_gamma") == 0.9 and env_setting(envs, "max_epochs") == 4
        envs.reset(seed=0)
    finally:
        envs.close()


def test_sub_envs_that_disagree_are_refused() -> None:
    def make(gamma: float) -> Any:
        return lambda: gym.make("Esper-Synthetic-v0", pbrs_weight=0.5, pbrs_gamma=gamma, **SMALL)

    envs = gym.vector.SyncVectorEnv([make(0.9), make(0.99)])
    with pytest.raises(ValueError, match=r"the sub-envs disagree on pbrs_gamma: \[0.9, 0.99\]"):
        check_gamma_contract(envs, 0.9)


class Opaque(gym.vector.VectorEnv):
    """A vector env that exposes no settings at all."""

    def __init__(self, **spec_kwargs: Any) -> None:
        self.num_envs = 1
        self.single_action_space = gym.spaces.MultiDiscrete([5, 3, 7, 3, 3])
        self.single_observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.spec = EnvSpec("Opaque-v0", kwargs=spec_kwargs)


def test_shaping_settings_that_cannot_be_read_are_refused_not_assumed() -> None:
    with pytest.raises(ValueError, match=r"made with \['pbrs_gamma', 'pbrs_weight'\] but the agent cannot read"):
        check_gamma_contract(Opaque(pbrs_weight=0.5, pbrs_gamma=0.9), 0.995)
    check_gamma_contract(Opaque(), 0.995)  # an env that declares no shaping shapes nothing
