"""MaskablePPO through ``esper_env.sb3`` on the growable family host (CPU, synthetic data): a few updates run, and
every action it takes is one its masks allow, so it never plants a blueprint past the family catalogue, a gated
blend, or a growth a stage has no room for."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.utils import get_action_masks
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecMonitor

from esper_env.blueprints import FAMILY_BLUEPRINTS
from esper_env.lifecycle import BLEND_CURVES
from esper_env.sb3 import make_sb3_env
from esper_env.spaces import BLUEPRINT_NAMES, Head, Op
from esper_env.wrappers import joint_actions

ID = "Esper-Synthetic-v0"
# Two-epoch episodes (a seed holds its slot to the end, so short ones plant most often); stage 0 may only deepen,
# stage 1 nothing, stage 2 only widen.
KWARGS = dict(host="family", max_epochs=2, train_images_per_epoch=256, batch_size=128, collapse_patience=0,
              device="cpu", max_widths=(16, 32, 256), max_blocks=(1, 0, 0))
N, STEPS = 2, 24
GATED = BLEND_CURVES.index("gated")
TABLE = joint_actions(3)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """One intra-op thread: the tiny nets gain nothing from a second, which spins against other processes."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


class Recorder(BaseCallback):
    """Each step's actions, the masks MaskablePPO chose them under, and the env's invalid-action flags."""

    def __init__(self) -> None:
        super().__init__()
        self.actions, self.masks, self.invalid = [], [], []

    def _on_step(self) -> bool:
        self.actions.append(np.array(self.locals["actions"]))
        self.masks.append(np.array(self.locals["action_masks"]))
        self.invalid += [bool(info["invalid_action"]) for info in self.locals["infos"]]
        return True


def _learn(flatten: bool) -> tuple[Recorder, MaskablePPO]:
    env = VecMonitor(make_sb3_env(ID, N, flatten, seed=0, **KWARGS))
    model = MaskablePPO("MlpPolicy", env, n_steps=STEPS // N, batch_size=12, n_epochs=2, seed=0, device="cpu")
    recorder = Recorder()
    model.learn(total_timesteps=STEPS, callback=recorder)
    return recorder, model


def _check_plantings(actions: np.ndarray) -> None:
    """(steps, heads) native actions: the GERMINATEs among them plant what the limits allow, ungated."""
    germinate = actions[actions[:, Head.OP] == Op.GERMINATE]
    assert len(germinate) >= 3
    assert (germinate[:, Head.BLUEPRINT] < len(FAMILY_BLUEPRINTS)).all() and (germinate[:, Head.BLEND] != GATED).all()


def test_maskable_ppo_on_joint_actions_takes_only_valid_ones() -> None:
    recorder, model = _learn(flatten=True)
    assert model.num_timesteps == STEPS and not any(recorder.invalid)
    actions, masks = np.concatenate(recorder.actions), np.concatenate(recorder.masks)
    assert masks[np.arange(len(actions)), actions].all()  # every joint index chosen was allowed when chosen
    native = TABLE[actions]
    _check_plantings(native)
    germinate = native[native[:, Head.OP] == Op.GERMINATE]
    assert (germinate[:, Head.SLOT] != 1).all()  # stage 1 is full
    assert ((germinate[:, Head.SLOT] == 0) == (germinate[:, Head.BLUEPRINT] == 0)).all()  # deepen only in stage 0


def test_maskable_ppo_on_the_native_heads_follows_the_marginal_masks() -> None:
    env = make_sb3_env(ID, N, flatten=False, seed=0, **KWARGS)
    env.reset()
    sizes = env.action_space.nvec
    heads = np.split(get_action_masks(env), np.cumsum(sizes)[:-1], axis=1)
    assert not heads[Head.BLUEPRINT][:, len(FAMILY_BLUEPRINTS) : len(BLUEPRINT_NAMES)].any()
    assert not heads[Head.BLEND][:, GATED].any()
    recorder, model = _learn(flatten=False)
    assert model.num_timesteps == STEPS
    actions, masks = np.concatenate(recorder.actions), np.concatenate(recorder.masks)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    assert masks[np.arange(len(actions))[:, None], actions + offsets].all()  # each head within its own mask
    _check_plantings(actions)
