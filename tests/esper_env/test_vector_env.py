"""The vector env and the single env behave as Gymnasium envs should, and agree with each other."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers.vector import RecordEpisodeStatistics

import esper_env  # noqa: F401  (registers the ids)
from esper_env.env import EsperEnv
from esper_env.spaces import Head, Op
from esper_env.vector_env import EsperVectorEnv

ID = "Esper-Synthetic-v0"


def _germinate(slot: int = 1, blueprint: int = 5) -> np.ndarray:
    return np.array([Op.GERMINATE, slot, blueprint, 0, 0], dtype=np.int64)


WAIT = np.zeros(5, dtype=np.int64)


def test_check_env_passes(tiny):
    env = gym.make(ID, **tiny)
    check_env(env.unwrapped, skip_render_check=True, skip_close_check=True)


def test_make_and_make_vec_use_the_two_entry_points(tiny):
    assert isinstance(gym.make(ID, **tiny).unwrapped, EsperEnv)
    venv = gym.make_vec(ID, num_envs=2, **tiny)
    assert isinstance(venv.unwrapped, EsperVectorEnv) and venv.num_envs == 2
    assert venv.spec.kwargs["num_envs"] == 2
    assert gym.make(ID, **tiny).spec.to_json()


def test_module_prefixed_id_works_without_a_prior_import():
    code = ("import gymnasium as gym; e = gym.make('esper_env:Esper-Synthetic-v0', device='cpu', "
            "synthetic_train_size=64, batch_size=32); print(type(e.unwrapped).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "EsperEnv"


def test_vector_equals_single_envs_step_by_step(tiny):
    """Sub-env i of a vector env seeded s behaves exactly like a single env seeded s + i (on the CPU)."""
    n, seed = 3, 11
    venv = gym.make_vec(ID, num_envs=n, **tiny)
    singles = [gym.make(ID, **tiny) for _ in range(n)]
    v_obs, v_info = venv.reset(seed=seed)
    for i, env in enumerate(singles):
        obs, info = env.reset(seed=seed + i)
        np.testing.assert_array_equal(obs, v_obs[i])
        np.testing.assert_array_equal(info["op_slot_mask"], v_info["op_slot_mask"][i])
    rng = np.random.default_rng(0)
    for t in range(tiny["max_epochs"]):
        actions = np.stack([_germinate(slot=int(rng.integers(3))) if t == 0 else WAIT for _ in range(n)])
        v_obs, v_rew, v_term, v_trunc, v_info = venv.step(actions)
        for i, env in enumerate(singles):
            obs, rew, term, trunc, info = env.step(actions[i])
            np.testing.assert_array_equal(obs, v_obs[i])
            assert rew == v_rew[i] and term == v_term[i] and trunc == v_trunc[i]
            np.testing.assert_array_equal(info["action_mask"], v_info["action_mask"][i])
            np.testing.assert_array_equal(info["op_slot_mask"], v_info["op_slot_mask"][i])


def test_same_seed_same_trajectory_different_seed_different(tiny):
    def run(seed):
        env = gym.make(ID, **tiny)
        obs, _ = env.reset(seed=seed)
        trace = [obs]
        for t in range(3):
            trace.append(env.step(_germinate() if t == 0 else WAIT)[0])
        return np.stack(trace)

    np.testing.assert_array_equal(run(5), run(5))
    assert not np.array_equal(run(5), run(6))


def test_data_volume_per_sub_env_does_not_depend_on_num_envs(tiny):
    counts = []
    for n in (1, 3):
        venv = gym.make_vec(ID, num_envs=n, **tiny)
        venv.reset(seed=0)
        _, _, _, _, info = venv.step(np.zeros((n, 5), dtype=np.int64))
        counts.append(set(info["images_trained"].tolist()))
    assert counts[0] == counts[1] == {tiny["synthetic_train_size"]}


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_autoreset_modes(tiny, mode):
    tiny["max_epochs"] = 2
    venv = gym.make_vec(ID, num_envs=2, autoreset_mode=mode, **tiny)
    assert venv.metadata["autoreset_mode"] == AutoresetMode(mode)
    venv.reset(seed=0)
    actions = np.zeros((2, 5), dtype=np.int64)
    venv.step(actions)
    obs, rew, term, trunc, info = venv.step(actions)
    assert trunc.all() and not term.any()
    if mode == "NextStep":
        assert obs[0][0] == pytest.approx(1.0)  # the terminal observation: progress = 1
        obs, rew, term, trunc, info = venv.step(actions)  # the reset step ignores the actions
        assert (rew == 0).all() and not trunc.any() and info["reset"].all() and obs[0][0] == 0.0
    elif mode == "SameStep":
        assert obs[0][0] == 0.0 and info["final_obs"][0][0] == pytest.approx(1.0)
        assert info["_final_obs"].all() and info["final_info"]["_val_accuracy"].all()
    else:
        with pytest.raises(RuntimeError, match="reset"):
            venv.step(actions)
        obs, info = venv.reset(options={"reset_mask": np.array([True, False])})
        with pytest.raises(RuntimeError, match=r"\[1\]"):
            venv.step(actions)
        venv.reset(options={"reset_mask": np.array([False, True])})
        venv.step(actions)


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_record_episode_statistics_under_each_mode(tiny, mode):
    tiny["max_epochs"] = 2
    venv = RecordEpisodeStatistics(gym.make_vec(ID, num_envs=2, autoreset_mode=mode, **tiny))
    venv.reset(seed=0)
    episodes = 0
    for _ in range(3 if mode != "Disabled" else 2):
        *_, info = venv.step(np.zeros((2, 5), dtype=np.int64))
        if "episode" in info:
            episodes += int(info["_episode"].sum())
            assert (info["episode"]["l"][info["_episode"]] == 2).all()
    assert episodes == 2


def test_reset_mask_and_seed_validation(tiny):
    venv = gym.make_vec(ID, num_envs=2, **tiny)
    for bad in ([True, False], np.array([1, 0]), np.array([True]), np.array([False, False])):
        with pytest.raises(ValueError, match="reset_mask"):
            venv.reset(options={"reset_mask": bad})
    with pytest.raises(ValueError, match="unknown reset option"):
        venv.reset(options={"mask": np.array([True, True])})
    with pytest.raises(ValueError, match="seed"):
        venv.reset(seed=[1])


@pytest.mark.parametrize("bad", [
    np.zeros((2, 4), dtype=np.int64), np.zeros(5, dtype=np.int64), np.zeros((2, 5), dtype=np.float32),
    np.full((2, 5), np.nan), np.array([[5, 0, 0, 0, 0]] * 2), np.array([[0, -1, 0, 0, 0]] * 2),
    np.array([[0, 0, 7, 0, 0]] * 2), "WAIT",
])
def test_malformed_actions_raise_and_change_nothing(tiny, bad):
    venv = gym.make_vec(ID, num_envs=2, **tiny)
    obs, info = venv.reset(seed=3)
    with pytest.raises(ValueError):
        venv.step(bad)
    reference = gym.make_vec(ID, num_envs=2, **tiny)
    reference.reset(seed=3)
    a = np.stack([_germinate(), WAIT])
    np.testing.assert_array_equal(venv.step(a)[0], reference.step(a)[0])


def test_invalid_action_runs_as_wait_and_is_flagged(tiny):
    tiny["invalid_action_penalty"] = 0.5
    env = gym.make(ID, **tiny)
    env.reset(seed=0)
    prune_empty = np.array([Op.PRUNE, 0, 0, 0, 0])
    _, reward, _, _, info = env.step(prune_empty)
    assert info["invalid_action"] and info["executed_op"] == Op.WAIT
    twin = gym.make(ID, **tiny)
    twin.reset(seed=0)
    _, wait_reward, _, _, wait_info = twin.step(WAIT)
    assert not wait_info["invalid_action"] and reward == pytest.approx(wait_reward - 0.5)


def test_masks_follow_the_lifecycle(tiny):
    env = gym.make(ID, **tiny)
    _, info = env.reset(seed=0)
    m = info["op_slot_mask"]
    assert m[Op.WAIT].all() and m[Op.GERMINATE].all() and not m[[Op.ADVANCE, Op.PRUNE, Op.FOSSILIZE]].any()
    assert info["action_mask"].dtype == bool and info["action_mask"].shape == (sum(env.action_space.nvec),)
    _, _, _, _, info = env.step(_germinate(slot=2))
    m = info["op_slot_mask"]
    assert not m[Op.GERMINATE].any()  # one seed incubating at a time
    assert m[Op.PRUNE].tolist() == [False, False, True]
    np.testing.assert_array_equal(env.unwrapped.action_masks(), info["action_mask"])


@pytest.mark.parametrize("fault", ["nan_loss", "exploding_loss", "nan_parameters"])
def test_fault_rolls_back_one_sub_env_and_leaves_the_others_alone(tiny, fault):
    n = 3
    venv = gym.make_vec(ID, num_envs=n, **tiny)
    clean = gym.make_vec(ID, num_envs=n, **tiny)
    venv.reset(seed=4)
    clean.reset(seed=4)
    actions = np.stack([_germinate(slot=i) for i in range(n)])
    venv.step(actions)
    clean.step(actions)
    venv.unwrapped.inject_fault(1, fault)
    obs, rew, term, trunc, info = venv.step(np.zeros((n, 5), dtype=np.int64))
    c_obs, c_rew, *_ = clean.step(np.zeros((n, 5), dtype=np.int64))
    assert term.tolist() == [False, True, False] and info["rollback"].tolist() == [False, True, False]
    assert rew[1] == -tiny.get("rollback_penalty", 1.0)
    for i in (0, 2):
        np.testing.assert_array_equal(obs[i], c_obs[i])
        assert rew[i] == c_rew[i]
    assert info["stage"][1][1] != info["stage"][0][1]  # the live seed of sub-env 1 was pruned


def test_observations_stay_in_the_space(tiny):
    venv = gym.make_vec(ID, num_envs=2, **tiny)
    obs, info = venv.reset(seed=0)
    for _ in range(tiny["max_epochs"]):
        assert venv.observation_space.contains(obs)
        actions = np.stack([
            venv.unwrapped.single_action_space.sample(mask=tuple(
                np.split(m.astype(np.int8), np.cumsum(venv.unwrapped.single_action_space.nvec)[:-1])))
            for m in info["action_mask"]])
        obs, _, _, _, info = venv.step(actions)
        assert venv.observation_space.contains(obs)


def test_flat_mask_layout_matches_heads(tiny):
    env = gym.make(ID, **tiny)
    _, info = env.reset(seed=0)
    nvec = env.action_space.nvec
    parts = np.split(info["action_mask"], np.cumsum(nvec)[:-1])
    assert [len(p) for p in parts] == list(nvec)
    assert parts[Head.OP].tolist() == [True, True, False, False, False]


def test_rollback_step_counts_its_epoch_and_names_the_executed_slot(tiny):
    env = gym.make(ID, **tiny)
    env.reset(seed=0)
    _, _, _, _, info = env.step(_germinate(slot=2))
    assert info["epoch"] == 1 and info["executed_op"] == Op.GERMINATE and info["executed_slot"] == 2
    env.unwrapped.vector_env.inject_fault(0, "nan_loss")
    _, _, terminated, _, info = env.step(WAIT)
    assert terminated and info["rollback"] and info["epoch"] == 2 and info["executed_slot"] == -1


def test_faults_roll_back_even_a_seed_on_a_tiny_feature_map_or_a_dead_host(tiny):
    """nan_parameters poisons a whole tensor (one 3x3 corner tap may never meet data on a 1x1 map) and
    exploding_loss blows the logits up through the bias too (scaled weights do nothing to zero features)."""
    tiny = {**tiny, "synthetic_image_size": 8}
    env = gym.make(ID, **tiny)
    env.reset(seed=0)
    env.step(_germinate(slot=2, blueprint=5))  # conv_light on slot 2: a 1x1 feature map at 8 px
    env.unwrapped.vector_env.inject_fault(0, "nan_parameters")
    assert env.step(WAIT)[4]["rollback"]
    env.reset(seed=1)
    trainer = env.unwrapped.vector_env._engine.trainers[0]
    with torch.no_grad():
        trainer.model.blocks[-1][0].weight.zero_()  # a dead host: every feature is zero
    env.unwrapped.vector_env.inject_fault(0, "exploding_loss")
    assert env.step(WAIT)[4]["rollback"]
