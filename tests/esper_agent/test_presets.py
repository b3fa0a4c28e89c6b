"""The named presets: each loads, builds a valid env config, and is the config its committed result used."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import esper_env  # registers the ids the presets name
from esper_agent import presets
from esper_agent.config import AgentConfig
from esper_env.config import EnvConfig

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_presets_are_shipped() -> None:
    assert {"cifar10-fast-budget", "cifar10-fast-budget-scratch", "cifar10-v0-e3", "synthetic-grow"} <= set(
        presets.names())


@pytest.mark.parametrize("name", presets.names())
def test_a_preset_builds_valid_configs(name: str) -> None:
    preset = presets.load(name)
    config = AgentConfig(**preset.agent)
    env = EnvConfig.from_kwargs(**{**gym.spec(preset.run["env"]).kwargs, **preset.run["env_kwargs"]})
    # A rollout holds whole episodes (esper_agent.trainer): the preset must not leave rollout_steps to a default
    # that a different episode length would break.
    assert config.rollout_steps == env.max_epochs
    assert preset.description and (ROOT / preset.result).exists(), preset.result


def recorded_runs(result: Path) -> list[dict[str, Any]]:
    """What each seed of a committed result ran: env, env kwargs, sub-envs, updates and the whole agent config."""
    if result.is_dir():  # benchmarks.compare_agents slices, one per seed
        slices = [json.loads(p.read_text()) for p in sorted(result.glob("seed*.json"))]
        return [{"env": s["env"], "env_kwargs": s["env_kwargs"], "num_envs": s["num_envs"],
                 "host_epochs": s["budget_host_epochs"], "agent": s["agent_config"]} for s in slices]
    report = json.loads(result.read_text())  # benchmarks.agent_vs_random: one report for every seed
    env_kwargs = {k: v for k, v in report["env_kwargs"].items() if k != "device"}  # where it ran, not what
    return [{"env": report["env"], "env_kwargs": env_kwargs, "num_envs": report["num_envs"],
             "host_epochs": report["updates"] * report["num_envs"] * seed["config"]["rollout_steps"],
             "agent": seed["config"]} for seed in report["per_seed"]]


# Env settings added after the committed results whose default changes behaviour, and the value that behaves as
# the results ran: a preset pins them so that it reproduces its result.
# The governor's collapse rule (off = as before it existed), and the small host's task, which the CIFAR-10 ids
# stopped being by default when they became the task's version 2.
ADDED_SINCE = {"collapse_patience": 0, **esper_env.SMALL_TASK}


def added_since(preset: presets.Preset) -> dict[str, Any]:
    """:data:`ADDED_SINCE` for a preset of the small-host task, whose results predate those settings; nothing for
    one of the task's version 2, whose results ran with every setting recorded as it is now."""
    return ADDED_SINCE if preset.run["env_kwargs"].get("host") == "small" else {}


@pytest.mark.parametrize("name", presets.names())
def test_a_preset_is_the_config_its_committed_result_used(name: str) -> None:
    """Every seed of the result ran the preset's env, env kwargs, sub-envs, budget and agent config. A recorded
    config older than some field is read as :meth:`AgentConfig.from_dict` reads it (the value before the field
    existed), so a field added since must keep that behaviour for the preset to pass."""
    preset = presets.load(name)
    runs = recorded_runs(ROOT / preset.result)
    assert len(runs) >= 5, preset.result
    config = AgentConfig(**preset.agent)
    host_epochs = preset.run["total_updates"] * preset.run["num_envs"] * config.rollout_steps
    for run in runs:
        assert run["env"] == preset.run["env"]
        assert added_since(preset) | run["env_kwargs"] == preset.run["env_kwargs"]
        assert (run["num_envs"], run["host_epochs"]) == (preset.run["num_envs"], host_epochs)
        assert AgentConfig.from_dict(run["agent"]) == config


def test_a_malformed_preset_is_refused_by_name() -> None:
    good = {"description": "d", "result": "r", "run": {"env": "Esper-Synthetic-v0"}, "agent": {}}
    assert presets.parse("ok", good).run == {"env": "Esper-Synthetic-v0"}
    with pytest.raises(ValueError, match=r"preset 'bad' has keys \['agent', 'description', 'result'\]"):
        presets.parse("bad", {k: v for k, v in good.items() if k != "run"})
    with pytest.raises(ValueError, match=r"preset 'bad': unknown run setting\(s\) \['envs'\]"):
        presets.parse("bad", good | {"run": {"envs": 8}})
    with pytest.raises(ValueError, match=r"unknown AgentConfig field\(s\) \['lr'\]"):
        presets.parse("bad", good | {"agent": {"lr": 0.1}})
