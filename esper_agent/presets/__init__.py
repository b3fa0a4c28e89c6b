"""Named training configs: ``python -m esper_agent.train --preset <name>``.

Each ``<name>.json`` in this folder is the whole config of one committed result, so that the result can be
reproduced by name rather than by copying JSON::

    {"description": "what it trains and why",
     "result": "benchmarks/results/... (the committed result it reproduces)",
     "run": {"env": ..., "env_kwargs": {...}, "num_envs": ..., "total_updates": ..., "device": ...},
     "agent": {AgentConfig fields that differ from, or must not drift with, the defaults}}

``run`` holds the train command's run settings (the flags of the same names); ``agent`` holds
:class:`~esper_agent.config.AgentConfig` fields. A preset is checked when it is loaded: unknown keys, run
settings or agent fields raise an error naming them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from esper_agent.config import AgentConfig

RUN_KEYS = frozenset({"env", "env_kwargs", "num_envs", "total_updates", "device", "seed"})
"""The run settings a preset may fix (the train command's flags of the same names)."""
PRESET_KEYS = frozenset({"description", "result", "run", "agent"})


@dataclass(frozen=True)
class Preset:
    """One named config: its run settings and agent fields, as the train command's flags would give them."""

    name: str
    description: str
    result: str
    """Where the committed result this preset reproduces lives (a path under benchmarks/results)."""
    run: dict[str, Any]
    agent: dict[str, Any]


def names() -> list[str]:
    """The presets shipped with the package, sorted."""
    folder = resources.files(__name__)
    return sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json"))


def load(name: str) -> Preset:
    """The preset ``name``; raises ``ValueError`` naming the known presets when there is none of that name."""
    known = names()
    if name not in known:
        raise ValueError(f"unknown preset {name!r}; expected one of {known}")
    text = resources.files(__name__).joinpath(f"{name}.json").read_text()
    return parse(name, json.loads(text))


def parse(name: str, data: dict[str, Any]) -> Preset:
    """Check a preset's JSON object and build it; errors name the preset and the offending keys."""
    if not isinstance(data, dict) or set(data) != PRESET_KEYS:
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"preset {name!r} has keys {got}; expected exactly {sorted(PRESET_KEYS)}")
    unknown_run = sorted(set(data["run"]) - RUN_KEYS)
    if unknown_run:
        raise ValueError(f"preset {name!r}: unknown run setting(s) {unknown_run}; expected some of {sorted(RUN_KEYS)}")
    AgentConfig.from_dict(data["agent"])  # unknown fields, wrong types and out-of-range values raise here
    return Preset(name, str(data["description"]), str(data["result"]), dict(data["run"]), dict(data["agent"]))


__all__ = ["Preset", "RUN_KEYS", "load", "names", "parse"]
