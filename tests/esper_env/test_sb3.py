"""``esper_env.sb3``: the adapter keeps SB3's ``VecEnv`` contract and MaskablePPO trains and evaluates through it.

SB3 ships no checker for vector envs, so the contract of its ``DummyVecEnv`` is written out here: shapes and
dtypes, same-step reset with ``terminal_observation`` exactly when done, ``TimeLimit.truncated`` as the chosen
horizon reading says (checked against what SB3's rollout buffer then stores), reset observations and masks
spliced in, seeds and options used once, and the mask protocol sb3-contrib reads.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.evaluation import evaluate_policy
from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import VecEnv, VecMonitor

from esper_env.sb3 import Sb3VecEnv, make_sb3_env
from esper_env.spaces import Op
from esper_env.wrappers import joint_actions, joint_mask

ID = "Esper-Synthetic-v0"
ROOT = Path(__file__).resolve().parents[2]
N, EPOCHS, SLOTS = 2, 3, 3
TABLE = joint_actions(SLOTS)
FLATTEN = pytest.mark.parametrize("flatten", [True, False], ids=["joint", "marginal"])


@pytest.fixture
def kwargs(tiny: dict) -> dict:
    return {**tiny, "max_epochs": EPOCHS}


@pytest.fixture(autouse=True)
def one_torch_thread():
    """One intra-op thread for these tests, restored after each. The tiny host CNN gains nothing from a second
    one, and on a busy 2-core machine two OpenMP threads spin against other processes: measured there, this file
    took 142 s with two threads and 9 s with one."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def wait(env: Sb3VecEnv) -> np.ndarray:
    return np.zeros(N, dtype=np.int64) if env.flatten else np.zeros((N, 5), dtype=np.int64)


def joint_index(op: Op, slot: int) -> int:
    return int(np.flatnonzero((TABLE[:, 0] == op) & (TABLE[:, 1] == slot))[0])


def sample(env: Sb3VecEnv, rng: np.random.Generator) -> np.ndarray:
    """One action per sub-env allowed by the adapter's masks (per head when not flattened)."""
    masks = env.env_method("action_masks")
    if env.flatten:
        return np.array([rng.choice(np.flatnonzero(m)) for m in masks])
    splits = np.cumsum(env.action_space.nvec)[:-1]
    return np.array([[rng.choice(np.flatnonzero(h)) for h in np.split(m, splits)] for m in masks])


def test_import_esper_env_does_not_import_sb3():
    code = "import sys, esper_env; print(any(m.startswith(('stable_baselines3', 'sb3_contrib')) for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


@FLATTEN
def test_spaces_reset_and_masks(kwargs, flatten):
    env = make_sb3_env(ID, N, flatten, seed=0, **kwargs)
    assert isinstance(env, VecEnv) and env.num_envs == N
    expected = gym.spaces.Discrete(len(TABLE)) if flatten else gym.spaces.MultiDiscrete([5, SLOTS, 7, 3, 3])
    assert env.action_space == expected and env.observation_space == env.vector_env.single_observation_space
    obs = env.reset()
    assert obs.dtype == np.float32 and obs.shape == (N, *env.observation_space.shape)
    assert env._seeds == [None] * N  # SB3: seeds are used by one reset only
    width = len(TABLE) if flatten else int(sum(env.action_space.nvec))
    masks = get_action_masks(env)
    assert is_masking_supported(env) and masks.shape == (N, width) and masks.dtype == bool
    for i, info in enumerate(env.reset_infos):
        np.testing.assert_array_equal(info["action_mask"], masks[i])
        native = joint_mask(info["op_slot_mask"]) if flatten else env.vector_env.action_masks()[i]
        np.testing.assert_array_equal(masks[i], native)


@FLATTEN
def test_step_contract_over_a_whole_episode(kwargs, flatten):
    env = make_sb3_env(ID, N, flatten, seed=1, **kwargs)
    first = env.reset()
    first_masks = get_action_masks(env)
    for t in range(EPOCHS):
        obs, rewards, dones, infos = env.step(wait(env))
        assert obs.dtype == np.float32 and obs.shape == first.shape
        assert rewards.dtype == np.float32 and rewards.shape == (N,) and np.isfinite(rewards).all()
        assert dones.dtype == bool and dones.shape == (N,)
        assert isinstance(infos, list) and len(infos) == N and all(isinstance(i, dict) for i in infos)
        assert dones.all() == (t == EPOCHS - 1)  # truncated at max_epochs, nothing else ends an episode here
        for i, info in enumerate(infos):
            assert ("terminal_observation" in info) == dones[i]
            assert info["TimeLimit.truncated"] == dones[i]  # a time limit, not a termination
            assert not info["invalid_action"] and info["epoch"] == t + 1
            np.testing.assert_array_equal(info["action_mask"], get_action_masks(env)[i])
    for i, info in enumerate(infos):
        terminal = info["terminal_observation"]
        assert terminal.dtype == np.float32 and terminal[0] == 1.0  # progress: the episode's last epoch
        np.testing.assert_array_equal(obs[i], first[i])  # the next episode's first observation, spliced in
        np.testing.assert_array_equal(info["action_mask"], first_masks[i])  # and its masks
        np.testing.assert_array_equal(env.reset_infos[i]["action_mask"], first_masks[i])


def test_termination_is_not_a_time_limit_and_only_that_sub_env_resets(kwargs):
    env = make_sb3_env(ID, N, flatten=True, seed=2, **kwargs)
    env.reset()
    env.step(wait(env))
    assert env.env_method("inject_fault", 1, "nan_loss") == [None, None]  # called once on the native env
    obs, rewards, dones, infos = env.step(wait(env))
    assert dones.tolist() == [False, True] and infos[1]["rollback"]
    assert infos[1]["TimeLimit.truncated"] is False and not infos[0]["TimeLimit.truncated"]
    assert "terminal_observation" not in infos[0] and "terminal_observation" in infos[1]
    assert obs[1][0] == 0.0 and obs[0][0] == pytest.approx(2 / EPOCHS)  # progress: reset vs still running
    assert rewards[1] < 0  # the rollback penalty, on the very transition


def test_joint_masks_are_exact(kwargs):
    env = make_sb3_env(ID, N, flatten=True, seed=3, **kwargs)
    env.reset()
    germinate, advance = joint_index(Op.GERMINATE, 0), joint_index(Op.ADVANCE, 0)
    assert get_action_masks(env)[:, germinate].all() and not get_action_masks(env)[:, advance].any()
    _, _, _, infos = env.step(np.array([germinate, advance]))
    assert [info["invalid_action"] for info in infos] == [False, True]  # a masked index runs as WAIT, flagged
    assert infos[0]["stage"][0] != 0 and infos[1]["stage"][0] == 0
    masks, op_slot = get_action_masks(env), env.vector_env.op_slot_masks()
    for i in range(N):
        np.testing.assert_array_equal(masks[i], op_slot[i][TABLE[:, 0], TABLE[:, 1]])
    assert not masks[0, germinate] and masks[1, germinate]  # slot 0 of sub-env 0 holds a seed now


@FLATTEN
def test_same_step_and_disabled_native_modes_agree(kwargs, flatten):
    """The adapter over a SameStep native env gives what it gives over a Disabled one, step by step."""
    envs = [make_sb3_env(ID, N, flatten, seed=4, **kwargs, autoreset_mode=m) for m in ("Disabled", "SameStep")]
    np.testing.assert_array_equal(*(e.reset() for e in envs))
    rng = np.random.default_rng(0)
    for t in range(EPOCHS + 2):
        actions = sample(envs[0], rng)
        if t == 1:
            for e in envs:
                e.env_method("inject_fault", 0, "nan_loss")
        (obs_a, rew_a, done_a, info_a), (obs_b, rew_b, done_b, info_b) = (e.step(actions) for e in envs)
        np.testing.assert_array_equal(obs_a, obs_b)
        np.testing.assert_array_equal(rew_a, rew_b)
        np.testing.assert_array_equal(done_a, done_b)
        for a, b in zip(info_a, info_b, strict=True):
            a.pop("reset"), b.pop("reset")  # the native SameStep info marks every sub-env reset (env-side quirk)
            np.testing.assert_equal(a, b)
        np.testing.assert_array_equal(*(get_action_masks(e) for e in envs))


def test_seeds_and_options_follow_sb3(kwargs):
    def trace(seed: int) -> np.ndarray:
        env = make_sb3_env(ID, N, flatten=True, **kwargs)
        env.seed(seed)
        rows = [env.reset()] + [env.step(wait(env))[0] for _ in range(2)]
        return np.stack(rows)

    a, b, c = trace(7), trace(7), trace(8)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a[1:], c[1:])
    assert not np.array_equal(a[1:, 0], a[1:, 1])  # sub-env i is seeded seed + i, as in SB3
    env = make_sb3_env(ID, N, flatten=True, **kwargs)
    env.set_options({"unknown": 1})
    with pytest.raises(ValueError, match="unknown"):
        env.reset()
    env.set_options([{}, {"reset_mask": None}])
    with pytest.raises(ValueError, match="same dict for every sub-env"):
        env.reset()


def test_attributes_methods_and_wrapping(kwargs):
    env = make_sb3_env(ID, N, flatten=False, **kwargs)
    env.reset()
    assert env.get_attr("render_mode") == [None, None] and env.render_mode is None
    assert env.get_attr("config", indices=[1])[0].max_epochs == EPOCHS
    assert env.has_attr("action_masks") and env.has_attr("pbrs_gamma") and not env.has_attr("no_such_thing")
    with pytest.raises(AttributeError, match="no_such_thing"):
        env.get_attr("no_such_thing")
    masks = env.get_attr("action_masks", indices=1)[0]()
    np.testing.assert_array_equal(masks, env.env_method("action_masks", indices=[1])[0])
    env.set_attr("render_mode", None)
    with pytest.raises(ValueError, match="share one native vector env"):
        env.set_attr("render_mode", None, indices=[0])
    with pytest.raises(ValueError, match=r"indices \[5\]"):
        env.env_method("action_masks", indices=[5])
    assert env.env_is_wrapped(Monitor) == [False, False]
    monitored = VecMonitor(env)
    assert is_masking_supported(monitored) and get_action_masks(monitored).shape == (N, 21)
    with pytest.warns(UserWarning, match="render_mode"):
        assert env.render() is None
    env.close()


def test_refusals_name_the_problem(kwargs):
    with pytest.raises(ValueError, match="autoreset_mode='NextStep'"):
        Sb3VecEnv(gym.make_vec(ID, num_envs=N, **kwargs))
    with pytest.raises(TypeError, match="expected a gymnasium.vector.VectorEnv"):
        Sb3VecEnv(gym.make(ID, **kwargs))
    env = make_sb3_env(ID, N, flatten=True, **kwargs)
    env.reset()
    with pytest.raises(RuntimeError, match="step_async"):
        env.step_wait()
    with pytest.raises(ValueError, match=f"expected an integer in \\[0, {len(TABLE)}\\)"):
        env.step(np.array([0, len(TABLE)]))


HORIZON = pytest.mark.parametrize("horizon", ["terminal", "truncated"])


@HORIZON
def test_horizon_says_whether_the_end_at_max_epochs_is_a_time_limit(kwargs, horizon):
    env = make_sb3_env(ID, N, flatten=False, seed=5, horizon=horizon, **kwargs)
    assert env.horizon == horizon
    env.reset()
    for _ in range(EPOCHS):
        obs, _, dones, infos = env.step(wait(env))
    assert dones.all()
    for info in infos:
        assert info["TimeLimit.truncated"] is (horizon == "truncated")
        assert info["terminal_observation"][0] == 1.0  # given either way: the episode's last observation
    env.reset()
    env.env_method("inject_fault", 0, "nan_loss")
    _, _, dones, infos = env.step(wait(env))
    assert dones.tolist() == [True, False] and infos[0]["TimeLimit.truncated"] is False  # a rollback, either way


def test_an_unknown_horizon_is_refused(kwargs):
    with pytest.raises(ValueError, match=r"horizon='episodic'; expected one of \('terminal', 'truncated'\)"):
        make_sb3_env(ID, N, flatten=True, horizon="episodic", **kwargs)


class LastRewards(BaseCallback):
    """The env's rewards at the rollout's last step (episodes end there), the value the policy gives each
    terminal observation, and the rewards SB3's rollout buffer stored for that step."""

    def _on_step(self) -> bool:
        if self.locals["dones"].all():
            self.raw = self.locals["rewards"].copy()  # before SB3 adds any bootstrap to it in place
            self.terminal = np.stack([info["terminal_observation"] for info in self.locals["infos"]])
        return True

    def _on_rollout_end(self) -> None:  # before the update: the policy that collected the rollout
        self.stored = self.model.rollout_buffer.rewards[-1].copy()
        with torch.no_grad():
            obs = self.model.policy.obs_to_tensor(self.terminal)[0]
            self.values = self.model.policy.predict_values(obs).numpy().ravel()


@HORIZON
def test_maskable_ppo_bootstraps_the_last_reward_only_when_truncated(kwargs, horizon):
    """SB3's own collection (``MaskablePPO.collect_rollouts``) reads ``TimeLimit.truncated``: with ``"truncated"``
    the buffer's last reward is the env's plus ``gamma * V(terminal_observation)``, with ``"terminal"`` it is the
    env's."""
    env = VecMonitor(make_sb3_env(ID, N, flatten=True, horizon=horizon, **kwargs))
    model = MaskablePPO("MlpPolicy", env, n_steps=EPOCHS, batch_size=N * EPOCHS, n_epochs=1, seed=0, device="cpu")
    last = LastRewards()
    model.learn(total_timesteps=N * EPOCHS, callback=last)
    assert np.abs(last.values).min() > 1e-4  # a bootstrap would show
    expected = last.raw + model.gamma * last.values if horizon == "truncated" else last.raw
    np.testing.assert_allclose(last.stored, expected, rtol=1e-6, atol=1e-7)


class InvalidActionCounter(BaseCallback):
    """Counts the steps the env executed as WAIT because the mask MaskablePPO used let an invalid action through."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = self.invalid = 0

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            self.steps += 1
            self.invalid += bool(info["invalid_action"])
        return True


@FLATTEN
def test_maskable_ppo_learns_and_evaluates(kwargs, flatten):
    env = VecMonitor(make_sb3_env(ID, N, flatten, **kwargs))
    counter = InvalidActionCounter()
    model = MaskablePPO("MlpPolicy", env, n_steps=8, batch_size=8, n_epochs=2, seed=0, device="cpu")
    model.learn(total_timesteps=32, callback=counter)
    assert counter.steps == 32 and model.num_timesteps == 32
    mean, std = evaluate_policy(model, env, n_eval_episodes=2, use_masking=True)
    assert np.isfinite(mean) and np.isfinite(std)
    rate = counter.invalid / counter.steps
    print(f"invalid-action rate during learning, flatten={flatten}: {rate:.3f}")
    if flatten:
        assert rate == 0.0  # exact joint masks: MaskablePPO cannot pick an invalid action


def test_maskable_ppo_example_runs(kwargs):
    spec = importlib.util.spec_from_file_location("maskable_ppo", ROOT / "examples" / "maskable_ppo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    mean = module.main(["--num-envs", "2", "--timesteps", "12", "--n-steps", "6", "--eval-episodes", "2",
                        "--no-flatten", "--env-kwargs", json.dumps(kwargs)])
    assert np.isfinite(mean)
