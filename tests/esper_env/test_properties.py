"""Property tests: masks, lifecycle and rewards hold for any reachable state and any config in range."""

from __future__ import annotations

import ast
import dataclasses
import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import esper_env
from esper_env import masks
from esper_env.config import EnvConfig
from esper_env.episode import Episode, Measurement, apply_action, finish_epoch, full_seed_params
from esper_env.rewards import RewardInputs, parameter_cost, step_reward
from esper_env.seeds import seed_param_count
from esper_env.spaces import BLUEPRINT_NAMES, Head, Op, head_sizes

SLOTS = 3
NVEC = np.array(head_sizes(SLOTS))
PARAM_TABLE = np.array([[[seed_param_count(b, c, False), seed_param_count(b, c, True)]
                         for b in range(len(BLUEPRINT_NAMES))] for c in EnvConfig().host_widths], dtype=float)
"""``[slot, blueprint, gated]`` parameters for the default host (one slot after each block), as the env builds it."""

def _config(**kwargs: Any) -> EnvConfig:
    """An ``EnvConfig`` whose sparse clip is at least its scale in sparse mode (the config refuses less)."""
    if kwargs["reward_mode"] == "sparse":
        kwargs["sparse_clip"] = max(kwargs["sparse_clip"], kwargs["sparse_scale"])
    return EnvConfig(**kwargs)


unmasked_configs = st.builds(
    _config,
    dataset=st.just("synthetic"),
    reward_mode=st.sampled_from(["accuracy", "contribution", "sparse"]),
    param_penalty=st.floats(0, 10), param_budget=st.one_of(st.none(), st.integers(0, 10**6)),
    over_budget_penalty=st.floats(0, 10), pbrs_weight=st.floats(-5, 5), pbrs_gamma=st.floats(0.01, 1.0),
    op_cost=st.floats(0, 1), invalid_action_penalty=st.floats(0, 1), rollback_penalty=st.floats(0, 10),
    sparse_scale=st.floats(1e-3, 100), sparse_clip=st.floats(1e-3, 10),
    auto_advance=st.booleans(), one_seed_incubating=st.booleans(), min_training_epochs=st.integers(0, 4),
    max_holding_epochs=st.integers(1, 6), embargo_epochs=st.integers(0, 4), min_prune_age=st.integers(0, 3),
    fossilize_min_contribution=st.floats(-5, 5), max_seeds=st.one_of(st.none(), st.integers(1, SLOTS)),
)


def _with_budget_mask(drawn: tuple[EnvConfig, bool, int]) -> EnvConfig:
    cfg, masked, budget = drawn
    # A budget of the seeds' own scale (0 to about two conv_heavy at 32 channels), so the mask binds often.
    return dataclasses.replace(cfg, param_budget=budget, param_budget_mask=True) if masked else cfg


configs = st.tuples(unmasked_configs, st.booleans(), st.integers(0, 40_000)).map(_with_budget_mask)


def _random_valid_action(op_slot: np.ndarray, blueprints: np.ndarray, blends: np.ndarray, flat: np.ndarray,
                         data: st.DataObject) -> np.ndarray:
    """An action the exact masks allow; a head the op ignores takes a value its ``flat`` marginal admits."""
    ops = np.flatnonzero(op_slot.any(axis=1)).tolist()
    op = data.draw(st.sampled_from(ops))
    slot = data.draw(st.sampled_from(np.flatnonzero(op_slot[op]).tolist()))
    allowed = blueprints[slot] if op == Op.GERMINATE else flat[sum(NVEC[:2]) : sum(NVEC[:3])]
    blueprint = data.draw(st.sampled_from(np.flatnonzero(allowed).tolist()))
    allowed = blends[slot, blueprint] if op == Op.GERMINATE else flat[sum(NVEC[:3]) : sum(NVEC[:4])]
    blend = data.draw(st.sampled_from(np.flatnonzero(allowed).tolist()))
    tempo = data.draw(st.integers(0, int(NVEC[Head.TEMPO]) - 1))
    return np.array([op, slot, blueprint, blend, tempo], dtype=np.int64)


def _measurement(data: st.DataObject) -> Measurement:
    acc = st.floats(0, 1)
    return Measurement(
        train_loss=data.draw(st.floats(0, 10)), train_accuracy=data.draw(acc), val_loss=data.draw(st.floats(0, 10)),
        val_accuracy=data.draw(acc), host_only_accuracy=data.draw(acc),
        accuracy_without=tuple(data.draw(acc) for _ in range(SLOTS)), host_grad_norm=data.draw(st.floats(0, 10)),
        seed_grad_norms=tuple(data.draw(st.floats(0, 10)) for _ in range(SLOTS)), test_accuracy=None,
        images_trained=512,
    )


@settings(max_examples=150, deadline=None)
@given(cfg=configs, data=st.data())
def test_any_masked_action_sequence_is_legal(cfg, data):
    """Apply 30 steps of actions drawn from the masks to the pure episode logic: nothing ever raises, WAIT is
    always valid, a slot GERMINATE may target has a blueprint and each allowed blueprint a blend, the flat mask
    admits a spelling of every action the exact masks admit, and under a hard budget the seeds at full size, gates
    included, never pass it."""
    ep = Episode.fresh(SLOTS)
    for _ in range(30):
        blends = masks.blend_mask(ep.slots, cfg, PARAM_TABLE)
        blueprints = masks.blueprint_mask(ep.slots, cfg, PARAM_TABLE)
        op_slot = masks.op_slot_mask(ep.slots, cfg, blueprints)
        assert op_slot[Op.WAIT].all()
        assert blueprints[op_slot[Op.GERMINATE]].any(axis=1).all()
        np.testing.assert_array_equal(blueprints, blends.any(axis=-1))
        assert cfg.param_budget_mask or blends.all()
        flat = masks.flat_action_mask(op_slot, blueprints, blends)
        action = _random_valid_action(op_slot, blueprints, blends, flat, data)
        assert masks.is_valid(action, op_slot, blueprints, blends)
        offsets = np.concatenate([[0], np.cumsum(NVEC)[:-1]])
        assert all(flat[offsets[h] + action[h]] for h in Head)
        apply_action(ep, action, valid=True)
        finish_epoch(ep, _measurement(data), cfg)
        assert sum(s.has_seed for s in ep.slots) <= cfg.seed_limit
        if cfg.param_budget_mask:
            assert full_seed_params(ep.slots, PARAM_TABLE) <= cfg.param_budget  # exact: no allowance for a gate


@settings(max_examples=300, deadline=None)
@given(cfg=configs, data=st.data())
def test_rewards_are_finite_for_any_config(cfg, data):
    big = st.floats(-1e12, 1e12)
    inputs = RewardInputs(
        accuracy=data.draw(st.floats(0, 1)), previous_accuracy=data.draw(st.floats(0, 1)),
        seed_params=data.draw(st.floats(0, 1e9)), previous_seed_params=data.draw(st.floats(0, 1e9)),
        host_params=data.draw(st.integers(0, 10**6)), potential=data.draw(big), previous_potential=data.draw(big),
        contributions=tuple(data.draw(st.lists(st.floats(-100, 100), max_size=3))),
        pruned_contribution=data.draw(st.floats(-100, 100)), executed_op=data.draw(st.booleans()),
        invalid=data.draw(st.booleans()), last_step=data.draw(st.booleans()), rollback=data.draw(st.booleans()),
    )
    reward = step_reward(inputs, cfg)
    assert math.isfinite(reward)
    if cfg.reward_mode == "sparse" and not inputs.rollback:
        assert abs(reward) <= cfg.sparse_clip


def test_sparse_reward_keeps_the_order_of_final_accuracies_and_clips_the_cost_side():
    """clip(scale * (A_T - cost)) with a clip below the scale paid 1.0 for 40%, 60% and 78% alike: such a pair is
    refused, and with an allowed pair the reward orders final accuracies while the clip still bounds a large
    parameter cost (the clip is applied after scaling)."""
    with pytest.raises(ValueError, match=r"^sparse_clip=1.0 is below sparse_scale=2.5"):
        EnvConfig(dataset="synthetic", reward_mode="sparse", sparse_scale=2.5)
    EnvConfig(dataset="synthetic", reward_mode="accuracy", sparse_scale=2.5)  # unused outside sparse mode: fine
    cfg = EnvConfig(dataset="synthetic", reward_mode="sparse", sparse_scale=2.5, sparse_clip=2.5)
    base = RewardInputs(0.5, 0.4, 0.0, 0.0, 100, 0.0, 0.0, (), 0.0, False, False, True, False)
    rewards = [step_reward(base._replace(accuracy=a), cfg) for a in (0.40, 0.60, 0.78, 1.0)]
    assert rewards == pytest.approx([1.0, 1.5, 1.95, 2.5]) and rewards == sorted(set(rewards))
    costly = base._replace(seed_params=10**6)  # a cost of 10**6 / 100 * 0.01 = 100 host-sizes
    assert step_reward(costly, cfg) == -2.5  # 2.5 * (0.5 - 100), clipped after scaling
    assert step_reward(base._replace(last_step=False), cfg) == 0.0


def test_shaping_sums_to_zero_over_an_episode_whatever_the_stages_end_in():
    """Phi is 0 after the last step, so with gamma 1 the shaping of an episode sums to -Phi_0 = 0 even when the
    seeds end in high-potential stages (a terminal bonus would change the optimal policy)."""
    cfg = EnvConfig(dataset="synthetic", pbrs_weight=1.0, pbrs_gamma=1.0, param_penalty=0.0)
    potentials = [0.0, 0.1, 0.3, 0.9, 1.0]  # Phi_0 .. Phi_T: two seeds planted, ending fossilized
    total = 0.0
    for t in range(1, len(potentials)):
        last = t == len(potentials) - 1
        x = RewardInputs(0.5, 0.5, 0.0, 0.0, 100, potentials[t], potentials[t - 1], (), 0.0, False, False, last,
                         False)
        total += step_reward(x, cfg)
    assert total == pytest.approx(0.0, abs=1e-12)


def test_shaping_telescopes_through_a_rollback():
    """A rollback ends the episode, so its reward carries the shaping of a step into a terminal state,
    -Phi_{t-1}: with gamma 1 the shaping still sums to -Phi_0 = 0 and the penalty is all that is left."""
    cfg = EnvConfig(dataset="synthetic", pbrs_weight=1.0, pbrs_gamma=1.0, param_penalty=0.0, rollback_penalty=0.25)
    potentials = [0.0, 0.1, 0.3, 0.7]  # Phi_0 .. Phi_{T-1}; the governor rolls back at step T
    total = 0.0
    for t in range(1, len(potentials)):
        x = RewardInputs(0.5, 0.5, 0.0, 0.0, 100, potentials[t], potentials[t - 1], (), 0.0, False, False, False,
                         False)
        total += step_reward(x, cfg)
    rollback = RewardInputs(0.5, 0.5, 0.0, 0.0, 100, 0.0, potentials[-1], (), 0.0, False, False, False, True)
    assert step_reward(rollback, cfg) == pytest.approx(-0.7 - 0.25)
    assert total + step_reward(rollback, cfg) == pytest.approx(-0.25, abs=1e-12)
    sparse = dataclasses.replace(cfg, reward_mode="sparse")  # no shaping in sparse mode, so none to close
    assert step_reward(rollback, sparse) == -0.25


def test_an_episode_ending_in_a_rollback_returns_its_accuracy_gain_minus_the_penalty(tiny):
    tiny.update(pbrs_weight=1.0, pbrs_gamma=1.0, param_penalty=0.0, rollback_penalty=0.25)
    env = gym.make("Esper-Synthetic-v0", **tiny)
    env.reset(seed=2)
    total, accuracy = 0.0, 0.0
    for t in range(3):
        action = np.array([Op.GERMINATE, 0, 5, 0, 0]) if t == 0 else np.zeros(5, dtype=np.int64)
        _, reward, _, _, info = env.step(action)
        total, accuracy = total + reward, info["val_accuracy"]
    assert info["stage"][0] != 0  # a seed whose stage has a potential is live when the host fails
    env.unwrapped.vector_env.inject_fault(0, "nan_loss")
    _, reward, terminated, _, info = env.step(np.zeros(5, dtype=np.int64))
    assert terminated and info["rollback"]
    assert total + reward == pytest.approx(accuracy - 0.1 - 0.25, abs=1e-9)


def test_the_budget_prices_only_the_parameters_past_it():
    cfg = EnvConfig(dataset="synthetic", param_penalty=0.01, param_budget=300, over_budget_penalty=1.0)
    assert parameter_cost(200, 1000, cfg) == pytest.approx(0.002)
    assert parameter_cost(500, 1000, cfg) == pytest.approx(0.005 + 0.2)  # 200 past the budget at 1.0
    assert parameter_cost(500, 1000, dataclasses.replace(cfg, param_budget=None)) == pytest.approx(0.005)


@pytest.mark.parametrize("budget", [None, 0, 10**9])
def test_return_telescopes_to_final_accuracy_minus_parameter_cost(tiny, budget):
    env = gym.make("Esper-Synthetic-v0", **tiny, param_budget=budget, over_budget_penalty=0.5)
    env.reset(seed=2)
    total, info = 0.0, {}
    for t in range(tiny["max_epochs"]):
        action = np.array([Op.GERMINATE, 0, 6, 0, 0]) if t == 0 else np.zeros(5, dtype=np.int64)
        _, reward, _, _, info = env.step(action)
        total += reward
    cfg, host = env.unwrapped.config, env.unwrapped.vector_env.host_params
    over = 0.0 if budget is None else max(0.0, info["seed_params"] - budget)
    expected = info["val_accuracy"] - 0.1 - (cfg.param_penalty * info["seed_params"] + 0.5 * over) / host
    assert info["seed_params"] > 0 and total == pytest.approx(expected, abs=1e-9)


def test_no_module_lists_stages_by_hand():
    """Stage sets live in lifecycle.py only; elsewhere a literal set/tuple/list of two or more stages would be
    a duplicated rule."""
    root = Path(esper_env.__file__).parent
    for path in root.glob("*.py"):
        if path.name == "lifecycle.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Set | ast.Tuple | ast.List):
                stages = [e for e in node.elts if isinstance(e, ast.Attribute) and ast.unparse(e.value) in
                          ("Stage", "S", "lifecycle.Stage")]
                assert len(stages) < 2, f"{path.name}:{node.lineno} lists stages by hand: {ast.unparse(node)}"


def test_config_rejects_bad_kwargs_by_name():
    with pytest.raises(TypeError, match="unknown"):
        gym.make("Esper-Synthetic-v0", not_a_field=1)
    with pytest.raises(ValueError, match="max_epochs"):
        gym.make("Esper-Synthetic-v0", max_epochs=0)
    with pytest.raises(TypeError, match="batch_size"):
        gym.make("Esper-Synthetic-v0", batch_size="64")
    assert dataclasses.asdict(EnvConfig.from_kwargs(host_widths=[8, 8]))["host_widths"] == (8, 8)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_fuzzed_malformed_actions_raise_value_error_naming_the_problem(data):
    """Any shape, dtype or value that is not a valid (num_envs, 5) integer array is refused by validation."""
    shape = data.draw(st.sampled_from([(2, 5), (2, 4), (5,), (1, 5), (2, 5, 1), ()]))
    dtype = data.draw(st.sampled_from([np.int64, np.int8, np.uint8, np.float32, np.float64, np.bool_]))
    values = data.draw(st.lists(st.one_of(st.integers(-3, 10), st.just(float("nan"))),
                                min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    with np.errstate(invalid="ignore"):
        array = np.array(values, dtype=np.float64).astype(dtype, copy=False).reshape(shape) if dtype != np.float64 \
            else np.array(values, dtype=dtype).reshape(shape)
    good = (shape == (2, 5) and np.dtype(dtype).kind in "iu"
            and ((array >= 0) & (array < NVEC[None, :])).all())
    if good:
        np.testing.assert_array_equal(masks.validate_actions(array, 2, NVEC), array)
    else:
        with pytest.raises(ValueError, match="action"):
            masks.validate_actions(array, 2, NVEC)
