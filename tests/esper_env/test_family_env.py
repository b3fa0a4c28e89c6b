"""The env on the growable family host: seeds join and slots grow again, masks follow the family's limits, and
the return telescopes to accuracy gained minus the growth cost (CPU, synthetic data)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from esper_env.architecture import Architecture, param_count
from esper_env.blueprints import FAMILY_BLUEPRINTS
from esper_env.lifecycle import Stage
from esper_env.spaces import Head, Op, observation_layout

FAMILY = {b.name: i for i, b in enumerate(FAMILY_BLUEPRINTS)}
KWARGS = dict(host="family", max_epochs=8, train_images_per_epoch=512, batch_size=128, host_lr=0.6,
              lr_schedule="wsd", crop_pad=2, param_penalty=0.0, min_training_epochs=1, collapse_patience=0,
              flops_price=0.02, params_price=0.01)


def _env(num_envs: int = 2, **overrides) -> gym.vector.VectorEnv:
    return gym.make_vec("Esper-Synthetic-v0", num_envs=num_envs, vectorization_mode="vector_entry_point",
                        **{**KWARGS, **overrides})


def _grow(info: dict, blueprint: int, slot: int) -> np.ndarray:
    """FOSSILIZE whatever may be fossilized, else GERMINATE ``blueprint`` in ``slot`` when allowed, else WAIT."""
    ops = info["op_slot_mask"]
    actions = np.zeros((ops.shape[0], len(Head)), np.int64)
    for i, mask in enumerate(ops):
        if mask[Op.FOSSILIZE].any():
            actions[i, Head.OP], actions[i, Head.SLOT] = Op.FOSSILIZE, np.flatnonzero(mask[Op.FOSSILIZE])[0]
        elif mask[Op.GERMINATE, slot] and info["blueprint_mask"][i, slot, blueprint]:
            actions[i, [Head.OP, Head.SLOT, Head.BLUEPRINT]] = Op.GERMINATE, slot, blueprint
    return actions


def _episode(env: gym.vector.VectorEnv, seed: int, policy) -> tuple[list[dict], np.ndarray, list[np.ndarray]]:
    _, info = env.reset(seed=seed)
    infos, total, actions = [], np.zeros(env.num_envs), []
    for _ in range(KWARGS["max_epochs"]):
        action = policy(info)
        _, reward, _, _, info = env.step(action)
        infos.append(info)
        total += reward
        actions.append(action)
    return infos, total, actions


def test_a_fossilized_seed_joins_the_host_and_its_slot_grows_again() -> None:
    env = _env(1, fossilize_min_contribution=-100.0)  # join whatever its measured contribution
    infos, _, actions = _episode(env, 0, lambda info: _grow(info, FAMILY["widen_s"], 2))
    ops = [int(a[0, Head.OP]) for a in actions]
    joined = ops.index(Op.FOSSILIZE)
    assert infos[joined]["stage"][0][2] == Stage.DORMANT  # the slot is free in the same step
    grown = Architecture((16, 32, 64), (0, 0, 0))  # widen_s: twice as wide
    assert infos[joined]["params"][0] == param_count(grown)  # the seed's weights are the host's now
    assert Op.GERMINATE in ops[joined + 1:]  # and the stage grows again
    model = env.unwrapped._engine.trainers[0].model
    assert model.arch == Architecture((16, 32, 128), (0, 0, 0)) and model.version >= 2  # it grew twice
    gains = env.unwrapped._engine.trainers[0].optimizer.gains  # what joined learns at the seeds' rate
    values = {round(float(v), 6) for g in gains if g is not None for v in g.unique()}
    assert values == {round(1 / 6, 6), 1.0}


def test_the_observation_shows_what_joined_the_host_after_its_slot_is_free() -> None:
    env = _env(1, fossilize_min_contribution=-100.0)
    width = {f.name: f.start for f in observation_layout(3)}["slot2.host_width"]
    obs, info = env.reset(seed=0)
    assert obs[0, width] == 0.0  # the seedling's 32 channels
    seen = []
    for _ in range(KWARGS["max_epochs"]):
        obs, _, _, _, info = env.step(_grow(info, FAMILY["widen_s"], 2))
        seen.append((env.unwrapped._engine.trainers[0].model.arch.widths[2], round(float(obs[0, width]), 5)))
    # log2(channels / 32) / log2(256 / 32), following every join, whatever the slot shows
    assert {(w, round(math.log2(w / 32) / 3, 5)) for w, _ in seen} == set(seen) and seen[-1][0] == 128


def test_masks_follow_the_family_catalogue_and_limits() -> None:
    env = _env(1, max_widths=(16, 32, 64), max_blocks=(0, 1, 1))
    _, info = env.reset(seed=0)
    allowed = info["blueprint_mask"][0]
    assert not allowed[:, len(FAMILY_BLUEPRINTS):].any()  # the head's values past the family catalogue
    assert not allowed[0].any()  # stage 0 is at its widest and deepest
    assert allowed[1].tolist()[:3] == [True, False, False]  # 32 channels at most: deepen only
    assert allowed[2].tolist()[:3] == [True, True, False]  # 64 fits twice 32, not four times
    assert not info["blend_mask"][0][..., 2].any()  # no gated blend on the family host


def test_the_return_telescopes_to_accuracy_gained_minus_the_growth_cost() -> None:
    env = _env(2)
    infos, total, _ = _episode(env, 1, lambda info: _grow(info, FAMILY["widen_s"], 1))
    last = infos[-1]
    chance = 0.1
    for i in range(2):
        flops_ratio = last["train_flops"][i] / last["train_flops_reference"][i]
        cost = 0.02 * math.log2(flops_ratio) + 0.01 * math.log2(last["params"][i] / last["params_reference"][i])
        assert flops_ratio > 1.0 and cost > 0.0
        assert total[i] == pytest.approx(last["val_accuracy"][i] - chance - cost, abs=1e-6)


def test_the_static_seedling_pays_nothing_and_a_reset_restores_it() -> None:
    env = _env(1)
    _episode(env, 2, lambda info: _grow(info, FAMILY["widen_l"], 0))
    assert env.unwrapped._engine.trainers[0].model.arch != Architecture()
    infos, total, _ = _episode(env, 2, lambda info: np.zeros((1, len(Head)), np.int64))
    last = infos[-1]
    assert env.unwrapped._engine.trainers[0].model.arch == Architecture()
    assert last["train_flops"][0] == last["train_flops_reference"][0]
    assert last["params"][0] == last["params_reference"][0] == param_count(Architecture())
    assert total[0] == pytest.approx(last["val_accuracy"][0] - 0.1, abs=1e-6)


def test_episodes_are_reproducible_from_the_reset_seed() -> None:
    runs = [_episode(_env(2), 3, lambda info: _grow(info, FAMILY["deepen"], 2))[1] for _ in range(2)]
    assert np.array_equal(runs[0], runs[1])


def test_a_larger_start_pays_its_size_against_the_seedling() -> None:
    env = _env(1, start_widths=(32, 64, 64), start_blocks=(0, 1, 1))
    infos, total, _ = _episode(env, 4, lambda info: np.zeros((1, len(Head)), np.int64))
    last, start = infos[-1], Architecture((32, 64, 64), (0, 1, 1))
    assert env.unwrapped._engine.trainers[0].model.arch == start
    assert last["params"][0] == param_count(start) and last["params_reference"][0] == param_count(Architecture())
    cost = (0.02 * math.log2(last["train_flops"][0] / last["train_flops_reference"][0])
            + 0.01 * math.log2(param_count(start) / param_count(Architecture())))
    assert total[0] == pytest.approx(last["val_accuracy"][0] - 0.1 - cost, abs=1e-6)


@pytest.mark.parametrize("name", ["widen_l", "deepen"])
def test_a_family_seed_is_mixed_in_from_germination(name: str) -> None:
    # A split, or a residual block whose last norm starts at zero, keeps the function at any amplitude, so the
    # grown network trains from the first epoch (lifecycle.blends_at_birth); the seed still passes through the
    # stages, its ramp complete at once.
    env = _env(1)
    _, info = env.reset(seed=0)
    stages, norms = [], []
    for step in range(3):
        _, _, _, _, info = env.step(_grow(info, FAMILY[name], 2))
        seed = env.unwrapped._engine.trainers[0].model.slots[2].seed
        learned = seed.out.weight if name != "deepen" else seed.norm2.weight  # born as a share of W, or zero
        if step == 0 and name != "deepen":  # the outgoing weights it was born with: its sources' given-up share
            copies = torch.bincount(seed.sources)[seed.sources].view(1, -1, *[1] * (seed.given.dim() - 2))
            norms.append(float((seed.given[:, seed.sources] / copies).norm()))
        elif step == 0:
            norms.append(0.0)  # a new block's last norm is born at zero
        stages.append(int(info["stage"][0][2]))
        norms.append(float(learned.detach().norm()))
        assert info["alpha"][0][2] == 1.0
    assert stages == [Stage.TRAINING, Stage.BLENDING, Stage.HOLDING]
    assert norms[0] != norms[1] != norms[2]  # learning from its first epoch


def test_a_join_draws_its_weights_from_the_episode_not_the_global_stream() -> None:
    # Widening a stage with a residual block draws the block's new rows: from the sub-env's own stream, so an
    # agent drawing from torch's global generator between steps changes nothing.
    def run(disturb: bool) -> list[torch.Tensor]:
        env = _env(1, family_blocks=(0, 1, 1), max_blocks=(0, 1, 1), fossilize_min_contribution=-100.0)
        _, info = env.reset(seed=1)
        for _ in range(KWARGS["max_epochs"]):
            if disturb:
                torch.rand(7)
            _, _, _, _, info = env.step(_grow(info, FAMILY["widen_s"], 1))
        model = env.unwrapped._engine.trainers[0].model
        assert model.arch.widths[1] > 32  # it joined a widened block
        return [p.detach().clone() for p in model.parameters()]

    assert all(torch.equal(a, b) for a, b in zip(run(False), run(True), strict=True))


def test_holding_steps_left_reports_the_keep_deadline() -> None:
    """info["holding_steps_left"] counts a holding seed's steps to the timeout: after a step at which it is 1, a
    WAIT lets the timeout prune the seed; it is 0 wherever nothing holds, after a reset too."""
    env = _env(max_epochs=10, max_holding_epochs=3)
    _, info = env.reset(seed=0)
    assert info["holding_steps_left"].shape == (2, 3) and not info["holding_steps_left"].any()
    seen = []
    for _ in range(10):
        left = info["holding_steps_left"].copy()
        action = np.zeros((2, len(Head)), np.int64)
        if info["op_slot_mask"][0, Op.GERMINATE, 2] and info["blueprint_mask"][0, 2, FAMILY["deepen"]]:
            action[0, [Head.OP, Head.SLOT, Head.BLUEPRINT]] = Op.GERMINATE, 2, FAMILY["deepen"]
        _, _, _, _, info = env.step(action)
        now = info["holding_steps_left"]
        holding = info["stage"] == Stage.HOLDING
        assert ((now > 0) == holding).all()
        assert (now[left > 1] == left[left > 1] - 1).all()  # one step less while it still holds
        assert (info["holding_timeout"][left == 1]).all() and (info["holding_timeout"] == (left == 1)).all()
        seen.extend(left[0].tolist())
    assert {3, 2, 1} <= set(seen)  # the seed held its whole time and then timed out
