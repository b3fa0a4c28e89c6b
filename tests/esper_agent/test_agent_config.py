"""AgentConfig: defaults, validation, help text and the 1:1 CLI mapping (sizes: tests/test_style.py)."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest

from esper_agent.config import AgentConfig, field_help
from esper_agent.train import build_parser


def test_design_defaults() -> None:
    cfg = AgentConfig()
    assert (cfg.gamma, cfg.gae_lambda, cfg.clip_coef, cfg.learning_rate, cfg.target_kl, cfg.update_epochs) == (
        0.995, 0.95, 0.2, 3e-4, 0.02, 4)
    assert 128 <= cfg.hidden_size <= 256 and cfg.adam_eps == 1e-5


def test_every_field_has_help_with_a_unit_and_one_flag() -> None:
    helps = field_help()
    fields = [f.name for f in dataclasses.fields(AgentConfig)]
    assert sorted(helps) == sorted(fields)
    for name in fields:  # a unit in parentheses, unless the field is a switch
        switch = dataclasses.fields(AgentConfig)[fields.index(name)].type == "bool"
        assert switch or re.search(r"\(.+\)", helps[name]), name
    parser = build_parser()
    flags = {a.dest: a for a in parser._actions}
    for name in fields:
        assert name in flags, name
        assert helps[name] in flags[name].help
    args = vars(parser.parse_args(["--clip-coef", "0.1", "--no-normalize-obs", "--update-epochs", "2"]))
    assert args == {"clip_coef": 0.1, "normalize_obs": False, "update_epochs": 2}


@pytest.mark.parametrize(("field", "value", "error"), [
    ("gamma", 0.0, ValueError), ("gamma", 1.5, ValueError), ("gae_lambda", -0.1, ValueError),
    ("num_minibatches", 0, ValueError), ("clip_coef", float("nan"), ValueError), ("target_kl", -1.0, ValueError),
    ("update_epochs", 2.5, TypeError), ("anneal_lr", 1, TypeError), ("anomaly_ratio_min", 2.0, ValueError),
])
def test_invalid_values_name_the_field(field: str, value: object, error: type) -> None:
    with pytest.raises(error, match=field):
        AgentConfig(**{field: value})


def test_from_dict_round_trip_and_unknown_keys() -> None:
    cfg = AgentConfig(hidden_size=64)
    assert AgentConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="bogus"):
        AgentConfig.from_dict({"bogus": 1})


def test_numpy_scalars_of_a_fields_kind_are_stored_as_python_values() -> None:
    """Sweeps built with numpy pass ``np.int64`` and ``np.float32``; the config keeps plain Python numbers so
    that config.json and checkpoints hold JSON types."""
    cfg = AgentConfig(rollout_steps=np.int64(4), learning_rate=np.float32(1e-3), gamma=np.float64(0.99),
                      clip_coef=np.int32(1))
    assert type(cfg.rollout_steps) is int and cfg.rollout_steps == 4
    assert type(cfg.learning_rate) is float and cfg.learning_rate == pytest.approx(1e-3)
    # An integer in a float field stays an integer, as a Python 1 passed there does.
    assert type(cfg.gamma) is float and type(cfg.clip_coef) is int and cfg.clip_coef == 1
    restored = AgentConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert restored == cfg


@pytest.mark.parametrize(("field", "value"), [
    ("rollout_steps", np.float64(4.0)), ("hidden_size", np.bool_(True)), ("gamma", np.bool_(True)),
    ("anneal_lr", np.bool_(True)), ("update_epochs", True), ("learning_rate", False),
])
def test_numbers_of_the_wrong_kind_are_refused(field: str, value: object) -> None:
    with pytest.raises(TypeError, match=field):
        AgentConfig(**{field: value})


def test_a_dict_from_before_a_field_existed_gets_what_runs_did_then() -> None:
    """Checkpoints written before ``bootstrap_truncation`` existed bootstrapped truncations: resuming one must
    keep doing so, though the field's default is now off."""
    old = AgentConfig().to_dict()
    del old["bootstrap_truncation"], old["wait_prior"], old["prune_prior"]
    restored = AgentConfig.from_dict(old)
    assert restored.bootstrap_truncation is True and not AgentConfig().bootstrap_truncation
    assert restored.wait_prior == restored.prune_prior == 0.0
