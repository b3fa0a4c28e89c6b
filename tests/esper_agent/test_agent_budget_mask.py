"""The agent side of a hard parameter budget: the driver carries ``blueprint_mask`` and ``blend_mask``, and every
policy respects them."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
import toy_env
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)

import esper_env  # noqa: F401  (registers the ids)
from esper_agent.baselines import RandomValidActor
from esper_agent.collect import masks_to_device
from esper_agent.config import AgentConfig
from esper_agent.distributions import ActionMasks
from esper_agent.envs import VectorEnvDriver
from esper_agent.heuristic import HeuristicActor, HeuristicConfig, allowed_blend
from esper_agent.trainer import Trainer
from esper_env.config import EnvConfig
from esper_env.lifecycle import BLEND_CURVES, SEEDED
from esper_env.seeds import seed_param_count
from esper_env.spaces import BLUEPRINT_NAMES, Head, Op, observation_layout, observation_size

ID = "Esper-Synthetic-v0"
SMALL = {"device": "cpu", "batch_size": 64, "eval_batch_size": 128, "synthetic_train_size": 256,
         "synthetic_val_size": 128, "synthetic_test_size": 64, "max_epochs": 8}
CHANNELS = EnvConfig().host_widths
SIZES = np.array([[seed_param_count(b, c) for b in range(len(BLUEPRINT_NAMES))] for c in CHANNELS])
"""Ungated parameters of each blueprint (column) in each slot (row) of the default host."""
GATED_SIZES = np.array([[seed_param_count(b, c, True) for b in range(len(BLUEPRINT_NAMES))] for c in CHANNELS])
"""The same with the blending gate."""
GATED = BLEND_CURVES.index("gated")
BLEND_FIELDS = [next(f for f in observation_layout(3) if f.name == f"slot{s}.blend") for s in range(3)]


def _budgeted(budget: int, num_envs: int = 2, **kwargs) -> gym.vector.VectorEnv:
    return gym.make_vec(ID, num_envs=num_envs, autoreset_mode="Disabled", **{**SMALL, **kwargs},
                        param_budget=budget, param_budget_mask=True)


def _full_seed_params(info: dict, obs: np.ndarray, i: int) -> int:
    """Sub-env ``i``'s seeds at full size, gates included: stage and blueprint from the step info, each seed's
    blend from the observation of the same step."""
    total = 0
    for slot, field in enumerate(BLEND_FIELDS):
        if info["stage"][i][slot] in SEEDED:
            gated = obs[i, field.start + GATED] == 1.0
            total += int((GATED_SIZES if gated else SIZES)[slot, info["blueprint"][i][slot]])
    return total


def _play(envs: gym.vector.VectorEnv, actor, episodes: int, check) -> int:
    """Run ``actor`` until ``episodes`` episodes ended; call ``check(info, masks, obs)`` after every step with the
    step's info, the masks the actor acted under and the step's (terminal) observations. Returns the number of
    GERMINATE ops executed."""
    driver = VectorEnvDriver(envs)
    obs, masks = driver.reset(seed=0)
    actor.reset(driver.num_envs)
    starts, ended, planted = np.ones(driver.num_envs, bool), 0, 0
    while ended < episodes:
        step = driver.step(actor.act(obs, masks, starts))
        check(driver.last_info, masks, step.final_obs)
        planted += int((driver.last_info["executed_op"] == Op.GERMINATE).sum())
        ended += int((step.terminated | step.truncated).sum())
        obs, masks, starts = step.obs, step.masks, step.episode_start
    return planted


def test_random_valid_actions_never_pass_a_hard_budget() -> None:
    budget, bound = 800, {"binding": 0, "gate": 0, "gated": 0}

    def check(info: dict, masks: ActionMasks, obs: np.ndarray) -> None:
        assert not info["invalid_action"].any()
        for i in range(len(info["stage"])):
            assert _full_seed_params(info, obs, i) <= budget  # exact: gates count, with no allowance
            assert info["seed_params"][i] <= budget  # alpha-weighted, so never above the full size
        germinable = masks.op_slot[:, Op.GERMINATE]
        bound["binding"] += int((~masks.blueprint.all(-1) & germinable).sum())
        # a blueprint that fits in a germinable slot only without its gate: the blend mask had to bind
        bound["gate"] += int((masks.blueprint & ~masks.blend[..., GATED] & germinable[..., None]).sum())
        germinated = info["executed_op"] == Op.GERMINATE
        bound["gated"] += int(sum(obs[i, BLEND_FIELDS[info["executed_slot"][i]].start + GATED] == 1.0
                                  for i in np.flatnonzero(germinated)))

    envs = _budgeted(budget, one_seed_incubating=False)
    planted = _play(envs, RandomValidActor(VectorEnvDriver(envs).head_sizes, seed=3), 6, check)
    # It planted, gated seeds too, and the budget ruled blueprints out of slots and gates off fitting blueprints.
    assert planted >= 4 and bound["gated"] > 0 and bound["binding"] > 0 and bound["gate"] > 0


def test_the_heuristic_never_acts_invalidly_under_a_tight_budget() -> None:
    budget = 200  # in slot 0, conv_light (592) is over: the rotation moves on to conv_small (80)

    def check(info: dict, masks: ActionMasks, obs: np.ndarray) -> None:
        assert not info["invalid_action"].any()
        assert all(_full_seed_params(info, obs, i) <= budget for i in range(len(info["stage"])))

    actor = HeuristicActor(3, HeuristicConfig(plateau_gain=0.5))  # plateau at once: plant as early as possible
    assert _play(_budgeted(budget), actor, 2, check) > 0


def test_a_gated_heuristic_falls_back_to_linear_where_the_gate_does_not_fit() -> None:
    # 100: in slot 0 conv_small fits ungated (80) but not gated (121), and nothing else of the rotation fits.
    budget, planted = 100, []

    def check(info: dict, masks: ActionMasks, obs: np.ndarray) -> None:
        assert not info["invalid_action"].any()
        assert all(_full_seed_params(info, obs, i) <= budget for i in range(len(info["stage"])))
        for i in np.flatnonzero(info["executed_op"] == Op.GERMINATE):
            field = BLEND_FIELDS[info["executed_slot"][i]]
            planted.append(int(np.argmax(obs[i, field.start : field.start + field.size])))

    actor = HeuristicActor(3, HeuristicConfig(plateau_gain=0.5, blend=GATED))
    assert _play(_budgeted(budget), actor, 2, check) > 0
    assert set(planted) == {BLEND_CURVES.index("linear")}


def test_allowed_blend_keeps_the_preferred_blend_where_it_is_allowed() -> None:
    assert allowed_blend(GATED, None) == GATED and allowed_blend(GATED, np.ones(3, bool)) == GATED
    assert allowed_blend(GATED, np.array([True, True, False])) == 0
    assert allowed_blend(1, np.array([False, True, False])) == 1
    with pytest.raises(ValueError, match=r"blend_mask row \[False, False, False\] allows no blend"):
        allowed_blend(GATED, np.zeros(3, bool))


def test_the_heuristic_skips_forbidden_blueprints_in_its_rotation() -> None:
    actor = HeuristicActor(3, HeuristicConfig(plateau_gain=0.5, blueprints=("conv_light", "conv_small", "depthwise")))
    actor.reset(1)
    obs = np.full((1, observation_size(3)), -1.0, np.float32)
    obs[0, 0], obs[0, 1], obs[0, 5:7] = 0.1, 0.5, 0.5  # early, and a plateau
    op_slot = np.zeros((1, len(Op), 3), bool)
    op_slot[0, Op.WAIT] = op_slot[0, Op.GERMINATE] = True
    blueprint = np.ones((1, 3, len(BLUEPRINT_NAMES)), bool)
    blueprint[0, 0, BLUEPRINT_NAMES.index("conv_light")] = False
    masks = ActionMasks(op_slot, np.ones((1, 21), bool), blueprint)
    first = actor.act(obs, masks, np.zeros(1, bool))[0]
    assert first[Head.OP] == Op.GERMINATE and first[Head.SLOT] == 0
    assert BLUEPRINT_NAMES[first[Head.BLUEPRINT]] == "conv_small"
    second = actor.act(obs, masks, np.zeros(1, bool))[0]
    assert BLUEPRINT_NAMES[second[Head.BLUEPRINT]] == "depthwise"  # the rotation continues after the one used
    rotation = [BLUEPRINT_NAMES.index(n) for n in actor.config.blueprints]
    blueprint[0, 0, rotation] = False  # slot 0 takes none of the rotation: slot 1 does
    third = actor.act(obs, masks, np.zeros(1, bool))[0]
    assert third[Head.SLOT] == 1 and BLUEPRINT_NAMES[third[Head.BLUEPRINT]] == "conv_light"
    blueprint[0, :, rotation] = False  # no free slot takes any: WAIT, and the rotation stays where it was
    before = actor.rotation.copy()
    assert actor.act(obs, masks, np.zeros(1, bool))[0][Head.OP] == Op.WAIT
    assert np.array_equal(actor.rotation, before)


def test_the_agent_collects_without_invalid_actions_under_a_budget() -> None:
    envs = _budgeted(700, one_seed_incubating=False, max_epochs=4)
    trainer = Trainer(envs, AgentConfig(rollout_steps=8, hidden_size=32, normalize_obs=False), seed=0)
    rollout, stats = trainer.collector.collect(5, trainer.sample_generator)
    assert stats.invalid == 0 and stats.op_counts[Op.GERMINATE] > 0
    germinate = rollout.actions[..., Head.OP] == Op.GERMINATE
    start = sum(trainer.collector.driver.head_sizes[:2])
    used = rollout.used_masks[..., start : start + len(BLUEPRINT_NAMES)][germinate]
    slots = rollout.actions[..., Head.SLOT][germinate]
    # Each GERMINATE drew its blueprint from what fits its own slot at 700 on an empty host or less.
    assert (used & ~torch.as_tensor(SIZES <= 700)[slots]).sum() == 0
    # ... and its blend from what fits with that blueprint there: the gated blend only where the gate fits too.
    used = rollout.used_masks[..., start + len(BLUEPRINT_NAMES) : start + len(BLUEPRINT_NAMES) + len(BLEND_CURVES)]
    blueprints = rollout.actions[..., Head.BLUEPRINT][germinate]
    gate_fits = torch.as_tensor(GATED_SIZES <= 700)[slots, blueprints]
    assert (used[germinate][:, GATED] & ~gate_fits).sum() == 0


def test_the_driver_carries_validates_and_splices_the_blueprint_and_blend_masks() -> None:
    driver = VectorEnvDriver(_budgeted(40, max_epochs=2))  # norm fits slots 0 and 1 (17, 33), nothing slot 2
    _, masks = driver.reset(seed=0)
    assert masks.blueprint.shape == (2, 3, len(BLUEPRINT_NAMES))
    assert masks.blueprint[:, 2].sum() == 0 and masks.blueprint[:, :2].any(-1).all()
    assert masks.blend.shape == (2, 3, len(BLUEPRINT_NAMES), len(BLEND_CURVES))
    np.testing.assert_array_equal(masks.blend.any(-1), masks.blueprint)
    assert not masks.blend[..., GATED].any()  # norm with its gate (58, 106) fits no slot
    on_device = masks_to_device(masks, torch.device("cpu"))
    assert torch.equal(on_device.blueprint, torch.as_tensor(masks.blueprint))
    assert torch.equal(on_device.blend, torch.as_tensor(masks.blend))
    germinate = np.array([[Op.GERMINATE, 0, 0, 0, 0], [0, 0, 0, 0, 0]])  # sub-env 0 spends 17 of 40
    step = driver.step(germinate)
    np.testing.assert_array_equal(step.masks.blueprint[0], SIZES[0, 0] + SIZES <= 40)
    np.testing.assert_array_equal(step.masks.blueprint[1], masks.blueprint[1])
    assert (step.masks.blueprint[0] != masks.blueprint[0]).any()  # norm no longer fits in slot 1 (17 + 33)
    step = driver.step(np.zeros((2, 5), np.int64))  # both episodes end: the reset masks are spliced in
    assert step.truncated.all()
    np.testing.assert_array_equal(step.masks.blueprint, masks.blueprint)
    np.testing.assert_array_equal(step.masks.blend, masks.blend)
    _, info = driver.envs.reset(seed=0)
    with pytest.raises(ValueError, match=r"info\['blueprint_mask'\] has shape \(2, 7\); expected \(2, 3, 7\)"):
        driver.masks_from_info({**info, "blueprint_mask": np.ones((2, 7), bool)})
    stuck = {**info, "blueprint_mask": info["blueprint_mask"].copy()}
    stuck["blueprint_mask"][1, 0] = False  # slot 0 may be germinated, yet no blueprint is allowed there
    with pytest.raises(ValueError, match="sub-env 1: slot 0 may be germinated but blueprint_mask"):
        driver.masks_from_info(stuck)
    with pytest.raises(ValueError, match=r"info\['blend_mask'\] has shape \(2, 3, 7\); expected \(2, 3, 7, 3\)"):
        driver.masks_from_info({**info, "blend_mask": info["blueprint_mask"]})
    stuck = {**info, "blend_mask": info["blend_mask"].copy()}
    stuck["blend_mask"][0, 1, 0] = False  # norm may be planted in slot 1, yet with no blend
    with pytest.raises(ValueError, match="sub-env 0: blueprint 0 may be planted in slot 1 but blend_mask"):
        driver.masks_from_info(stuck)


def test_an_env_without_budget_masks_gives_none() -> None:
    driver = VectorEnvDriver(gym.make_vec(toy_env.ENV_ID, num_envs=2))
    _, masks = driver.reset(seed=0)
    assert masks.blueprint is None and masks_to_device(masks, torch.device("cpu")).blueprint is None
    assert masks.blend is None and masks_to_device(masks, torch.device("cpu")).blend is None
