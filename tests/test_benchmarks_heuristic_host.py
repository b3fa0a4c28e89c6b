"""The benchmarks that build the heuristic give it the env's host kind, so that on the family host it plants the
family's blueprints (``esper_agent.heuristic``)."""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path

import gymnasium as gym
import pytest

import esper_env  # noqa: F401  (registers the ids)
from benchmarks import compare_agents, screen
from benchmarks.screen_arms import Arm
from esper_agent.envs import VectorEnvDriver

ID = "Esper-Synthetic-v0"


@pytest.mark.parametrize("host", ["small", "family"])
def test_the_screen_and_the_comparison_build_the_heuristic_for_the_envs_host(host: str, tmp_path: Path) -> None:
    kwargs = {"host": host, "device": "cpu", "max_epochs": 2}
    driver = VectorEnvDriver(gym.make_vec(ID, num_envs=1, vectorization_mode="vector_entry_point", **kwargs))
    assert screen.make_actor(Arm("heuristic", "heuristic"), driver, [0]).host == host
    args = Namespace(env=ID, env_kwargs=kwargs)
    assert compare_agents.make_actor("heuristic", args, 0, tmp_path).actor.host == host


@pytest.mark.parametrize("host", ["small", "family"])
def test_the_growth_screen_study_builds_the_heuristic_for_the_envs_host(host: str) -> None:
    from benchmarks.studies import growth_screen

    kwargs = {"host": host, "device": "cpu", "max_epochs": 2}
    driver = VectorEnvDriver(gym.make_vec(ID, num_envs=1, vectorization_mode="vector_entry_point", **kwargs))
    assert growth_screen.make_actor("heuristic", driver, 0).host == host
