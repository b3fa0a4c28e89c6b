"""FlattenActions gives exact joint masks; the random-agent example runs and only takes valid actions."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import esper_env  # noqa: F401
from esper_env.spaces import Head, Op
from esper_env.wrappers import FlattenActions, joint_actions

ROOT = Path(__file__).resolve().parents[2]


def test_joint_table_is_canonical():
    table = joint_actions(3)
    assert len(table) == 1 + 3 * 7 * 3 * 3 + 3 * 3 == 199
    assert len({tuple(row) for row in table}) == len(table)
    waits = table[table[:, Head.OP] == Op.WAIT]
    assert waits.tolist() == [[0, 0, 0, 0, 0]]  # heads WAIT ignores are pinned to 0


def test_flatten_actions_masks_are_exact(tiny):
    env = FlattenActions(gym.make("Esper-Synthetic-v0", **tiny))
    _, info = env.reset(seed=0)
    table = joint_actions(3)
    for t in range(4):
        mask = env.action_masks()
        np.testing.assert_array_equal(mask, info["action_mask"])
        expected = info["op_slot_mask"][table[:, Head.OP], table[:, Head.SLOT]]
        np.testing.assert_array_equal(mask, expected)
        valid = np.flatnonzero(mask)
        choice = valid[-1] if t == 0 else 0  # a germinate first, then WAIT
        _, _, _, _, info = env.step(int(choice))
        assert not info["invalid_action"]
    invalid = int(np.flatnonzero(~env.action_masks())[0])
    _, _, _, _, info = env.step(invalid)
    assert info["invalid_action"] and info["executed_op"] == Op.WAIT
    with pytest.raises(ValueError, match="flat action"):
        env.step(len(table))


def test_random_agent_example_runs(tiny, capsys):
    spec = importlib.util.spec_from_file_location("random_agent", ROOT / "examples" / "random_agent.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--num-envs", "2", "--episodes", "1", "--env-kwargs", '{"device": "cpu", "batch_size": 64, '
                 '"synthetic_train_size": 256, "synthetic_val_size": 128, "max_epochs": 4}'])
    out = capsys.readouterr().out
    assert out.count("final val accuracy") == 2
