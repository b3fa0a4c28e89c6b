"""``param_budget_mask``: a hard parameter budget enforced by masking GERMINATE, not by pricing it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from sb3_contrib.common.maskable.utils import get_action_masks

import esper_env  # noqa: F401  (registers the ids)
from esper_env import masks as env_masks
from esper_env.config import EnvConfig
from esper_env.lifecycle import BLEND_CURVES, EMPTY, SlotState, Stage
from esper_env.sb3 import make_sb3_env
from esper_env.seeds import seed_param_count
from esper_env.spaces import BLUEPRINT_NAMES, Head, Op, head_sizes
from esper_env.wrappers import joint_actions, joint_mask

ID = "Esper-Synthetic-v0"
CHANNELS = EnvConfig().host_widths  # one slot after each block: slot s has host_widths[s] channels
BUDGET = 600
"""Fits some blueprints in every slot and not others: in slot 0 (8 channels) all but bottleneck (704) and
conv_heavy (1184); in slot 2 (32 channels) only norm (65) and attention (552)."""
BLUEPRINT_PART = slice(sum(head_sizes(3)[:2]), sum(head_sizes(3)[:3]))  # the flat mask's blueprint slice
BLEND_PART = slice(sum(head_sizes(3)[:3]), sum(head_sizes(3)[:4]))  # ... and its blend slice
GATED = BLEND_CURVES.index("gated")


def _fits(budget: float, used: float = 0.0) -> np.ndarray:
    """The mask the arithmetic gives: each blueprint's ungated size in each slot, next to the room left."""
    sizes = np.array([[seed_param_count(b, c) for b in range(len(BLUEPRINT_NAMES))] for c in CHANNELS])
    return used + sizes <= budget


def _fits_blends(budget: float, used: float = 0.0) -> np.ndarray:
    """``(slot, blueprint, blend)``: each planting's size (its gate included for the gated blend) within the room."""
    sizes = np.array([[[seed_param_count(b, c, BLEND_CURVES[k] == "gated") for k in range(len(BLEND_CURVES))]
                       for b in range(len(BLUEPRINT_NAMES))] for c in CHANNELS])
    return used + sizes <= budget


def _germinate(slot: int, blueprint: str, blend: int = 0) -> np.ndarray:
    return np.array([Op.GERMINATE, slot, BLUEPRINT_NAMES.index(blueprint), blend, 0], dtype=np.int64)


WAIT = np.zeros(5, dtype=np.int64)


@pytest.fixture
def budgeted(tiny: dict) -> gym.Env:
    # one_seed_incubating off: the mask, not the incubation rule, decides where a second seed may go.
    return gym.make(ID, **tiny, param_budget=BUDGET, param_budget_mask=True, one_seed_incubating=False)


def test_blueprint_mask_is_the_budget_arithmetic(budgeted):
    _, info = budgeted.reset(seed=0)
    np.testing.assert_array_equal(info["blueprint_mask"], _fits(BUDGET))
    assert 0 < info["blueprint_mask"].sum() < info["blueprint_mask"].size  # the budget fits some, not all
    np.testing.assert_array_equal(budgeted.unwrapped.blueprint_mask(), info["blueprint_mask"])
    _, _, _, _, info = budgeted.step(_germinate(0, "conv_small"))
    assert not info["invalid_action"] and info["stage"][0] != Stage.DORMANT
    # The new seed counts at full size although its alpha is still 0 (seed_params, alpha-weighted, says 0).
    used = seed_param_count(BLUEPRINT_NAMES.index("conv_small"), CHANNELS[0])
    assert info["seed_params"] == 0.0
    np.testing.assert_array_equal(info["blueprint_mask"], _fits(BUDGET, used))
    assert (info["blueprint_mask"] != _fits(BUDGET)).any()


def test_a_germinate_the_mask_forbids_runs_as_wait(budgeted):
    _, info = budgeted.reset(seed=1)
    conv_heavy = BLUEPRINT_NAMES.index("conv_heavy")
    assert info["op_slot_mask"][Op.GERMINATE, 0] and not info["blueprint_mask"][0, conv_heavy]
    _, _, _, _, info = budgeted.step(_germinate(0, "conv_heavy"))
    assert info["invalid_action"] and info["executed_op"] == Op.WAIT and info["executed_slot"] == -1
    assert info["seed_params"] == 0.0 and info["stage"].tolist() == [Stage.DORMANT] * 3
    _, _, _, _, info = budgeted.step(_germinate(0, "conv_light"))  # allowed: the same slot takes a smaller seed
    assert not info["invalid_action"] and info["stage"][0] != Stage.DORMANT


def test_blend_mask_is_the_budget_arithmetic_with_the_gate():
    # 2 slots x 2 blueprints, [ungated, gated]; slot 0 holds blueprint 0 gated, which counts 20 at full size.
    table = np.array([[[10.0, 20.0], [30.0, 45.0]], [[5.0, 8.0], [29.0, 31.0]]])
    slots = (SlotState(stage=Stage.TRAINING, blueprint=0, blend=GATED, tempo=3), EMPTY)
    cfg = EnvConfig(param_budget=50, param_budget_mask=True)
    blends = env_masks.blend_mask(slots, cfg, table)
    assert blends.shape == (2, 2, len(BLEND_CURVES))
    # 20 used: slot 1's blueprint 1 fits ungated (20 + 29 = 49) but not gated (20 + 31 = 51); so does slot 0's
    # blueprint 1 (50 <= 50, 65 > 50); blueprint 0 fits either way in both slots.
    expected_gated = np.array([[True, False], [True, False]])
    np.testing.assert_array_equal(blends[..., BLEND_CURVES.index("linear")], np.ones((2, 2), bool))
    np.testing.assert_array_equal(blends[..., BLEND_CURVES.index("cosine")], np.ones((2, 2), bool))
    np.testing.assert_array_equal(blends[..., GATED], expected_gated)
    blueprints = env_masks.blueprint_mask(slots, cfg, table)
    np.testing.assert_array_equal(blueprints, np.ones((2, 2), bool))  # every blueprint fits with some blend
    tight = EnvConfig(param_budget=48, param_budget_mask=True)  # 20 + 29 > 48: slot 1's blueprint 1 fits no blend
    assert not env_masks.blend_mask(slots, tight, table)[1, 1].any()
    assert not env_masks.blueprint_mask(slots, tight, table)[1, 1]
    assert env_masks.blend_mask(slots, EnvConfig(param_budget=0), table).all()  # only priced: nothing masked


def test_the_env_publishes_the_blend_mask(budgeted):
    _, info = budgeted.reset(seed=0)
    conv_light = BLUEPRINT_NAMES.index("conv_light")
    np.testing.assert_array_equal(info["blend_mask"], _fits_blends(BUDGET))
    np.testing.assert_array_equal(info["blueprint_mask"], info["blend_mask"].any(-1))
    assert info["blueprint_mask"][0, conv_light] and not info["blend_mask"][0, conv_light, GATED]  # 592 / 633
    np.testing.assert_array_equal(budgeted.unwrapped.blend_mask(), info["blend_mask"])
    _, _, _, _, info = budgeted.step(_germinate(0, "conv_small", GATED))  # 121 with its gate
    assert not info["invalid_action"]
    np.testing.assert_array_equal(info["blend_mask"], _fits_blends(BUDGET, seed_param_count(3, CHANNELS[0], True)))


def test_a_gated_planting_past_the_budget_runs_as_wait(budgeted):
    _, info = budgeted.reset(seed=1)
    before = {key: info[key].copy() for key in ("blend_mask", "blueprint_mask", "op_slot_mask", "action_mask")}
    _, _, _, _, info = budgeted.step(_germinate(0, "conv_light", GATED))  # 592 fits, 633 with the gate does not
    assert info["invalid_action"] and info["executed_op"] == Op.WAIT and info["executed_slot"] == -1
    assert info["seed_params"] == 0.0 and info["stage"].tolist() == [Stage.DORMANT] * 3
    assert info["blueprint"].tolist() == [-1] * 3
    for key, mask in before.items():
        np.testing.assert_array_equal(info[key], mask)  # no state changed, so neither did a mask
    _, _, _, _, info = budgeted.step(_germinate(0, "conv_light", BLEND_CURVES.index("cosine")))  # ungated: fits
    assert not info["invalid_action"] and info["stage"][0] != Stage.DORMANT
    assert info["blueprint"][0] == BLUEPRINT_NAMES.index("conv_light")


def test_germinate_is_masked_where_no_blueprint_fits(tiny):
    env = gym.make(ID, **tiny, param_budget=60, param_budget_mask=True)  # norm fits slots 0 and 1 only (17, 33)
    _, info = env.reset(seed=0)
    assert info["blueprint_mask"][:2].any(axis=1).all() and not info["blueprint_mask"][2].any()
    assert info["op_slot_mask"][Op.GERMINATE].tolist() == [True, True, False]
    _, _, _, _, info = env.step(_germinate(2, "norm"))
    assert info["invalid_action"] and info["stage"][2] == Stage.DORMANT


def test_the_flat_blueprint_part_is_the_union_over_germinable_slots(budgeted):
    _, info = budgeted.reset(seed=0)
    union = info["blueprint_mask"][info["op_slot_mask"][Op.GERMINATE]].any(axis=0)
    assert not union.all()  # bottleneck and conv_heavy fit no slot
    np.testing.assert_array_equal(info["action_mask"][BLUEPRINT_PART], union)
    np.testing.assert_array_equal(budgeted.unwrapped.action_masks()[BLUEPRINT_PART], union)
    _, _, _, _, info = budgeted.step(_germinate(0, "conv_light"))  # 592: 8 left, less than any seed
    assert not info["blueprint_mask"].any() and not info["op_slot_mask"][Op.GERMINATE].any()
    assert info["action_mask"][BLUEPRINT_PART].all()  # no GERMINATE: WAIT ignores the head, any value goes
    assert info["action_mask"][BLEND_PART].all()


def test_the_flat_blend_part_is_the_union_over_plantable_pairs(tiny):
    env = gym.make(ID, **tiny, param_budget=40, param_budget_mask=True)  # norm fits slots 0, 1 only ungated (17, 33)
    _, info = env.reset(seed=0)
    assert info["op_slot_mask"][Op.GERMINATE].tolist() == [True, True, False]
    assert not info["blend_mask"][..., GATED].any()
    np.testing.assert_array_equal(info["action_mask"][BLEND_PART], [True, True, False])
    _, _, _, _, info = env.step(_germinate(0, "norm", GATED))  # not a spelling the exact masks allow
    assert info["invalid_action"] and info["stage"][0] == Stage.DORMANT
    roomy = gym.make(ID, **tiny, param_budget=BUDGET, param_budget_mask=True)
    _, info = roomy.reset(seed=0)
    assert info["blend_mask"][..., GATED].any() and info["action_mask"][BLEND_PART].all()


def test_vector_info_carries_the_mask_for_every_sub_env(tiny):
    venv = gym.make_vec(ID, num_envs=2, **tiny, param_budget=BUDGET, param_budget_mask=True)
    _, info = venv.reset(seed=0)
    assert info["blueprint_mask"].shape == (2, 3, len(BLUEPRINT_NAMES)) and info["_blueprint_mask"].all()
    assert info["blend_mask"].shape == (2, 3, len(BLUEPRINT_NAMES), len(BLEND_CURVES)) and info["_blend_mask"].all()
    _, _, _, _, info = venv.step(np.stack([_germinate(0, "conv_light"), WAIT]))
    assert info["_blueprint_mask"].all() and info["_blend_mask"].all()
    np.testing.assert_array_equal(info["blueprint_mask"][1], _fits(BUDGET))
    np.testing.assert_array_equal(info["blend_mask"][1], _fits_blends(BUDGET))
    assert not info["blueprint_mask"][0, 0, BLUEPRINT_NAMES.index("attention")]  # 592 + 76 > 600
    np.testing.assert_array_equal(venv.unwrapped.blueprint_masks(), info["blueprint_mask"])
    np.testing.assert_array_equal(venv.unwrapped.blend_masks(), info["blend_mask"])


def test_without_the_flag_every_blueprint_is_allowed(tiny):
    env = gym.make(ID, **tiny, param_budget=0)  # a budget that nothing fits, but only priced
    _, info = env.reset(seed=0)
    assert info["blueprint_mask"].shape == (3, len(BLUEPRINT_NAMES)) and info["blueprint_mask"].all()
    assert info["blend_mask"].shape == (3, len(BLUEPRINT_NAMES), len(BLEND_CURVES)) and info["blend_mask"].all()
    _, _, _, _, info = env.step(_germinate(0, "conv_heavy", GATED))
    assert not info["invalid_action"] and info["blueprint_mask"].all() and info["blend_mask"].all()
    assert info["action_mask"][BLUEPRINT_PART].all() and info["action_mask"][BLEND_PART].all()


def test_the_mask_needs_a_budget():
    with pytest.raises(ValueError, match=r"^param_budget_mask=True .*param_budget=None"):
        EnvConfig(param_budget_mask=True)
    with pytest.raises(ValueError, match=r"^param_budget_mask=True"):
        gym.make(ID, param_budget_mask=True)
    assert EnvConfig(param_budget_mask=True, param_budget=0).param_budget_mask


def test_joint_mask_reads_the_blueprint_and_blend_masks():
    op_slot = np.zeros((len(Op), 3), bool)
    op_slot[Op.WAIT] = op_slot[Op.GERMINATE] = op_slot[Op.PRUNE, 1] = True
    blueprints, blends = _fits(BUDGET), _fits_blends(BUDGET)
    table = joint_actions(3)
    germinate = table[:, Head.OP] == Op.GERMINATE
    slot, blueprint, blend = (table[germinate, h] for h in (Head.SLOT, Head.BLUEPRINT, Head.BLEND))
    mask = joint_mask(op_slot, blueprints)
    np.testing.assert_array_equal(mask[germinate], blueprints[slot, blueprint])
    exact = joint_mask(op_slot, blueprints, blends)
    np.testing.assert_array_equal(exact[germinate], blends[slot, blueprint, blend])
    assert (mask & ~exact).any()  # gated plantings whose blueprint fits ungated: only the blend mask catches them
    for m in (mask, exact):
        np.testing.assert_array_equal(m[~germinate], joint_mask(op_slot)[~germinate])  # the others ignore it
    assert joint_mask(op_slot)[germinate].all()  # None: unrestricted


def test_the_flat_sb3_adapter_masks_over_budget_joint_actions(tiny):
    env = make_sb3_env(ID, 2, flatten=True, seed=0, **{**tiny, "max_epochs": 3}, param_budget=BUDGET,
                       param_budget_mask=True)
    env.reset()
    table, masks = joint_actions(3), get_action_masks(env)
    germinate = table[:, Head.OP] == Op.GERMINATE
    over = germinate & ~_fits_blends(BUDGET)[table[:, Head.SLOT], table[:, Head.BLUEPRINT], table[:, Head.BLEND]]
    assert over.any() and not masks[:, over].any() and masks[:, germinate & ~over].all()
    # The gate alone puts it over: its blueprint fits ungated, so only the blend mask can exclude it.
    gate_only = over & _fits(BUDGET)[table[:, Head.SLOT], table[:, Head.BLUEPRINT]]
    assert gate_only.any() and (table[gate_only, Head.BLEND] == GATED).all()
    forbidden = int(np.flatnonzero(gate_only)[0])
    _, _, _, infos = env.step(np.array([forbidden, forbidden]))
    assert all(info["invalid_action"] for info in infos)
    marginal = make_sb3_env(ID, 2, flatten=False, seed=0, **{**tiny, "max_epochs": 3}, param_budget=BUDGET,
                            param_budget_mask=True)
    marginal.reset()
    blueprint_part = get_action_masks(marginal)[:, BLUEPRINT_PART]
    np.testing.assert_array_equal(blueprint_part, np.broadcast_to(_fits(BUDGET).any(axis=0), blueprint_part.shape))
    assert not blueprint_part.all()  # narrowed: conv_heavy fits in no slot


def test_fill_heads_completes_an_op_into_an_action_the_masks_allow():
    """The one sampler the example and the throughput benchmark share: whatever it draws, ``is_valid`` agrees."""
    slots = (EMPTY,) * 3
    cfg = EnvConfig(param_budget=BUDGET, param_budget_mask=True)
    table = np.array([[[seed_param_count(b, c, g) for g in (False, True)] for b in range(len(BLUEPRINT_NAMES))]
                      for c in CHANNELS])
    blends = env_masks.blend_mask(slots, cfg, table)
    blueprints = blends.any(-1)
    op_slot = env_masks.op_slot_mask(slots, cfg, blueprints)
    nvec, rng = np.array(head_sizes(3)), np.random.default_rng(0)
    drawn = [env_masks.fill_heads(Op.GERMINATE, op_slot, nvec, rng, blueprints, blends) for _ in range(300)]
    assert all(env_masks.is_valid(a, op_slot, blueprints, blends) for a in drawn)
    assert {int(a[Head.BLEND]) for a in drawn if not blends[a[Head.SLOT], a[Head.BLUEPRINT], GATED]} <= {0, 1}
    assert len({(int(a[Head.SLOT]), int(a[Head.BLUEPRINT])) for a in drawn}) > 3  # it does explore
