"""Baseline actors: random-valid is uniform over valid joint actions and never invalid."""

from __future__ import annotations

from collections import Counter

import gymnasium as gym
import numpy as np
import pytest
import toy_env
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)

from esper_agent.baselines import RandomValidActor, StaticActor
from esper_agent.distributions import ActionMasks
from esper_agent.envs import VectorEnvDriver
from esper_agent.evaluate import mean_ci95, run_episodes
from esper_env import spaces
from esper_env.spaces import Op

SIZES = spaces.head_sizes(2)


def test_random_valid_is_uniform_over_joint_actions() -> None:
    op_slot = np.zeros((1, len(Op), 2), bool)
    op_slot[0, Op.WAIT] = True
    op_slot[0, Op.PRUNE] = [True, True]
    op_slot[0, Op.GERMINATE] = [False, True]
    flat = np.ones((1, sum(SIZES)), bool)
    flat[0, : len(Op)] = op_slot[0].any(-1)
    flat[0, 5 + 2 : 5 + 2 + 7] = [True, True, False, False, False, False, False]  # 2 blueprints allowed
    masks = ActionMasks(op_slot, flat)
    actor = RandomValidActor(SIZES, seed=0)
    counts = Counter(tuple(actor.act(np.zeros((1, 3)), masks, np.ones(1, bool))[0]) for _ in range(9000))
    # WAIT (1) + PRUNE x 2 slots (2) + GERMINATE x 1 slot x 2 blueprints x 3 blends x 3 tempos (18) = 21 actions.
    assert len(counts) == 21
    assert all(abs(c / 9000 - 1 / 21) < 0.015 for c in counts.values())
    assert all(a[0] != Op.GERMINATE or a[2] in (0, 1) for a in counts)


def test_random_valid_weights_slots_by_the_blueprints_they_allow() -> None:
    """Under a blueprint mask the joint actions stay equally likely: a slot that allows one blueprint gets a
    third of the GERMINATE draws of a slot that allows three, and a forbidden blueprint is never drawn."""
    op_slot = np.zeros((1, len(Op), 2), bool)
    op_slot[0, Op.WAIT] = True
    op_slot[0, Op.GERMINATE] = [True, True]
    flat = np.ones((1, sum(SIZES)), bool)
    flat[0, : len(Op)] = op_slot[0].any(-1)
    blueprint = np.zeros((1, 2, 7), bool)
    blueprint[0, 0, 3] = True
    blueprint[0, 1, [0, 1, 2]] = True
    masks = ActionMasks(op_slot, flat, blueprint)
    actor, draws = RandomValidActor(SIZES, seed=1), 11100
    counts = Counter(tuple(actor.act(np.zeros((1, 3)), masks, np.ones(1, bool))[0]) for _ in range(draws))
    # WAIT (1) + GERMINATE x (slot 0: 1 blueprint + slot 1: 3 blueprints) x 3 blends x 3 tempos (36) = 37 actions.
    assert len(counts) == 37
    assert all(abs(c / draws - 1 / 37) < 0.008 for c in counts.values())
    assert all(a[0] != Op.GERMINATE or blueprint[0, a[1], a[2]] for a in counts)


def test_random_valid_weights_blueprints_by_the_blends_they_allow() -> None:
    """Under a blend mask (a gate that does not fit) the joint actions stay equally likely: a blueprint with two
    allowed blends gets two thirds of the draws of one with three, and a forbidden blend is never drawn."""
    op_slot = np.zeros((1, len(Op), 2), bool)
    op_slot[0, Op.WAIT] = True
    op_slot[0, Op.GERMINATE] = [False, True]
    flat = np.ones((1, sum(SIZES)), bool)
    flat[0, : len(Op)] = op_slot[0].any(-1)
    blend = np.zeros((1, 2, 7, 3), bool)
    blend[0, 1, 0] = True  # blueprint 0: every blend
    blend[0, 1, 1, :2] = True  # blueprint 1: linear and cosine, its gate does not fit
    masks = ActionMasks(op_slot, flat, blend.any(-1), blend)
    actor, draws = RandomValidActor(SIZES, seed=2), 8000
    counts = Counter(tuple(actor.act(np.zeros((1, 3)), masks, np.ones(1, bool))[0]) for _ in range(draws))
    # WAIT (1) + GERMINATE x slot 1 x (3 + 2 blends) x 3 tempos (15) = 16 actions.
    assert len(counts) == 16
    assert all(abs(c / draws - 1 / 16) < 0.015 for c in counts.values())
    assert all(a[0] != Op.GERMINATE or blend[0, a[1], a[2], a[3]] for a in counts)


def test_baselines_play_valid_episodes() -> None:
    driver = VectorEnvDriver(gym.make_vec(toy_env.ENV_ID, num_envs=3, autoreset_mode="SameStep"))
    for actor in (RandomValidActor(driver.head_sizes, seed=1), StaticActor()):
        records = run_episodes(driver, actor, 7, seed=5)
        assert len(records) == 7 and sorted(r.env for r in records) == [0, 0, 0, 1, 1, 2, 2]
    assert all(r.episode_return == 0.0 for r in records)  # static: always WAIT, never rewarded or punished


def test_mean_ci95() -> None:
    mean, half = mean_ci95([1.0, 2.0, 3.0])
    assert mean == 2.0 and abs(half - 4.303 * 1.0 / np.sqrt(3)) < 1e-9
    assert np.isnan(mean_ci95([5.0])[1]) and np.isnan(mean_ci95([])[0])


@pytest.mark.parametrize("n, t", [(31, 2.042), (32, 2.0395), (41, 2.0211), (48, 2.0117), (121, 1.9799)])
def test_mean_ci95_uses_student_t_beyond_the_table(n: int, t: float) -> None:
    # t for n - 1 degrees of freedom: the table's at 30, the exact quantile to 4 places above it
    values = [float(i % 2) for i in range(n)]
    mean, half = mean_ci95(values)
    assert half == pytest.approx(t * np.std(values, ddof=1) / np.sqrt(n), rel=1e-4)
