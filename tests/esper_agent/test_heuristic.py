"""The heuristic baseline plants on a plateau, fossilizes what helps and prunes what hurts."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import esper_env  # noqa: F401
from esper_agent.distributions import ActionMasks
from esper_agent.heuristic import HeuristicActor, HeuristicConfig
from esper_env.lifecycle import Stage
from esper_env.spaces import Op, observation_layout

KWARGS = {"device": "cpu", "batch_size": 64, "synthetic_train_size": 512, "synthetic_val_size": 256,
          "synthetic_image_size": 16, "max_epochs": 16}


def _obs(num_slots: int = 3, **values) -> np.ndarray:
    layout = {f.name: f for f in observation_layout(num_slots)}
    obs = np.zeros(layout["slot2.grad_ratio"].start + 1, dtype=np.float32)
    for name, value in values.items():
        field = layout[name]
        obs[field.start:field.start + field.size] = value
    return obs


def _masks(op_slot: np.ndarray) -> ActionMasks:
    return ActionMasks(op_slot=op_slot[None], flat=np.ones((1, 21), dtype=bool))


def _stage(stage: Stage) -> np.ndarray:
    return np.eye(len(Stage))[stage]


def test_rules_in_order():
    actor = HeuristicActor(3)
    actor.reset(1)
    everything = np.ones((5, 3), dtype=bool)
    holding_good = _obs(**{"slot1.stage": _stage(Stage.HOLDING), "slot1.contribution": 0.12,
                           "slot1.contribution_freshness": 1.0})
    assert actor.act(holding_good[None], _masks(everything), np.zeros(1))[0][:2].tolist() == [Op.FOSSILIZE, 1]
    blending_bad = _obs(**{"slot2.stage": _stage(Stage.BLENDING), "slot2.contribution": -0.05,
                           "slot2.contribution_freshness": 1.0})
    assert actor.act(blending_bad[None], _masks(everything), np.zeros(1))[0][:2].tolist() == [Op.PRUNE, 2]
    stale = _obs(**{"slot2.stage": _stage(Stage.BLENDING), "slot2.contribution": -0.05,
                    "slot2.contribution_freshness": 0.8, "val_accuracy": -1})
    assert actor.act(stale[None], _masks(everything), np.zeros(1))[0][0] == Op.WAIT
    plateau = _obs(progress=0.3, val_accuracy=0.50, val_accuracy_history=[0.495, 0.49, -1, -1, -1])
    first = actor.act(plateau[None], _masks(everything), np.zeros(1))[0]
    second = actor.act(plateau[None], _masks(everything), np.zeros(1))[0]
    assert first[0] == second[0] == Op.GERMINATE and first[2] != second[2]  # blueprints rotate
    climbing = _obs(progress=0.3, val_accuracy=0.60, val_accuracy_history=[0.55, 0.50, -1, -1, -1])
    assert actor.act(climbing[None], _masks(everything), np.zeros(1))[0][0] == Op.WAIT
    late = _obs(progress=0.9, val_accuracy=0.50, val_accuracy_history=[0.5, 0.5, -1, -1, -1])
    assert actor.act(late[None], _masks(everything), np.zeros(1))[0][0] == Op.WAIT


def test_a_synthetic_episode_only_takes_valid_actions_and_plants_seeds():
    envs = gym.make_vec("Esper-Synthetic-v0", num_envs=2, autoreset_mode="Disabled", **KWARGS)
    actor = HeuristicActor(3, HeuristicConfig(plateau_gain=0.5))  # plateau at once: plant as early as possible
    obs, info = envs.reset(seed=0)
    actor.reset(2)
    ops = []
    for t in range(KWARGS["max_epochs"]):
        actions = actor.act(obs, ActionMasks(info["op_slot_mask"], info["action_mask"]), np.full(2, t == 0))
        obs, _, _, _, info = envs.step(actions)
        assert not info["invalid_action"].any()
        ops += info["executed_op"].tolist()
    assert Op.GERMINATE in ops and (Op.FOSSILIZE in ops or Op.PRUNE in ops)
