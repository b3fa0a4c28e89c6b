"""The observation layout documented in EsperEnv's docstring is the one the code builds."""

from __future__ import annotations

import re

import numpy as np

from esper_env.architecture import Architecture
from esper_env.config import EnvConfig
from esper_env.env import EsperEnv
from esper_env.episode import Episode
from esper_env.observation import host_shape, observe
from esper_env.spaces import GLOBAL_FEATURES, SLOT_FEATURES, observation_layout, observation_size

ROW = re.compile(r"^\s*\|\s*(\+?\d+(?:-\d+)?)\s*\|\s*(\w+)\s*\|")


def _documented_rows() -> list[tuple[str, str]]:
    rows = [m.groups() for line in EsperEnv.__doc__.splitlines() if (m := ROW.match(line))]
    return [(index, name) for index, name in rows]


def _span(start: int, size: int, prefix: str = "") -> str:
    return f"{prefix}{start}" if size == 1 else f"{prefix}{start}-{start + size - 1}"


def test_docstring_table_matches_the_layout():
    expected = [(_span(f.start, f.size), f.name) for f in observation_layout(1) if "." not in f.name]
    offset = 0
    for feature in SLOT_FEATURES:
        expected.append((_span(offset, feature.size, "+"), feature.name))
        offset += feature.size
    assert _documented_rows() == expected
    global_size = sum(f.size for f in GLOBAL_FEATURES)
    assert "(33 + 27 * num_slots,)" in EsperEnv.__doc__ and (global_size, offset) == (33, 27)
    assert observation_size(3) == 114


def test_initial_observation_uses_sentinels_and_stays_in_range():
    cfg = EnvConfig(dataset="synthetic")
    obs = observe(Episode.fresh(3), cfg, np.ones((3, 7, 2)), 6000)
    layout = {f.name: f for f in observation_layout(3)}
    assert obs.dtype == np.float32 and obs.shape == (114,)
    assert obs[layout["val_accuracy"].start] == -1.0
    assert (obs[layout["val_accuracy_history"].start:][:5] == -1.0).all()
    assert obs[layout["slot0.stage"].start] == 1.0  # DORMANT
    assert np.all(np.abs(obs) <= 1.0)


def test_host_shape_places_each_stage_between_the_seedling_and_the_largest() -> None:
    cfg = EnvConfig(dataset="synthetic", host="family")  # seedling 16/32/32, blocks 0; largest 64/256/256, 0/1/1
    assert host_shape(cfg.seedling, cfg) == [(0.0, 0.0)] * 3
    assert host_shape(Architecture((32, 64, 256), (0, 1, 0)), cfg) == [(0.5, 0.0), (1 / 3, 1.0), (1.0, 0.0)]
    assert host_shape(None, EnvConfig(dataset="synthetic")) == [(0.0, 0.0)] * 3  # the small host
