"""``compare_agents --sb3-kwargs``: the MaskablePPO arms' hyperparameters, rollout length and observation/reward
normalisation (``benchmarks.sb3_train``): what reaches the model, what is refused, the normalisation's statistics
saved and restored across a pause, and frozen for evaluation."""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from sb3_contrib import MaskablePPO

from benchmarks import compare_agents, sb3_train
from benchmarks.sb3_actor import Sb3Actor

ENV = "Esper-Synthetic-v0"
TINY = {"device": "cpu", "max_epochs": 3, "synthetic_train_size": 256, "synthetic_val_size": 128,
        "synthetic_test_size": 128, "batch_size": 64}


def _argv(out: Path, sb3_kwargs: dict, *more: str) -> list[str]:
    """A maskable_flat slice of seed 0: 2 sub-envs of 3-epoch episodes, 24 host epochs."""
    return ["--env", ENV, "--env-kwargs", json.dumps(TINY), "--seeds", "0", "--eval-episodes", "1", "--num-envs", "2",
            "--arms", "maskable_flat", "--budget-epochs", "24", "--out", str(out), "--sb3-kwargs",
            json.dumps(sb3_kwargs), *more]


def _stats(norm) -> dict:
    """A VecNormalize's statistics and settings, as plain values."""
    return {"obs": (norm.obs_rms.mean.tolist(), norm.obs_rms.var.tolist(), norm.obs_rms.count),
            "ret": (norm.ret_rms.mean.tolist(), norm.ret_rms.var.tolist(), norm.ret_rms.count),
            "flags": (norm.norm_obs, norm.norm_reward, norm.gamma, norm.clip_obs)}


def test_the_kwargs_reach_the_model_and_a_paused_slice_refuses_other_ones(tmp_path):
    torch.set_num_threads(1)
    kwargs = {"learning_rate": 1e-4, "ent_coef": 0.01, "rollout_episodes": 2, "n_epochs": 3}
    compare_agents.main(_argv(tmp_path, kwargs, "--time-limit-s", "0"))  # one rollout of 2 episodes per sub-env
    folder = tmp_path / ENV / "maskable_flat"
    model = MaskablePPO.load(folder / "seed0.sb3.zip", device="cpu")
    assert (model.learning_rate, model.ent_coef, model.n_epochs) == (1e-4, 0.01, 3)
    assert (model.n_steps, model.batch_size, model.num_timesteps) == (6, 3, 12)  # 2 episodes of 3 steps, 2 sub-envs
    with pytest.raises(ValueError, match="sb3_kwargs"):
        compare_agents.main(_argv(tmp_path, kwargs | {"ent_coef": 0.0}))
    with pytest.raises(ValueError, match="sb3_kwargs"):
        compare_agents.main(_argv(tmp_path, {}))
    compare_agents.main(_argv(tmp_path, kwargs))
    slice_ = json.loads((folder / "seed0.json").read_text())
    assert slice_["sb3_kwargs"] == kwargs
    assert slice_["sb3_config"] == {"learning_rate": 1e-4, "ent_coef": 0.01, "n_epochs": 3, "gamma": 0.99,
                                    "gae_lambda": 0.95, "clip_range": 0.2, "vf_coef": 0.5, "max_grad_norm": 0.5,
                                    "n_steps": 6, "batch_size": 3, "normalize": None}  # sb3-contrib's defaults
    assert [p["host_epochs"] for p in slice_["curve"]] == [6, 6, 12, 12, 18, 18, 24, 24]
    compare_agents.main(_argv(tmp_path, kwargs))  # finished under the same kwargs: skipped
    with pytest.raises(SystemExit, match="expected a --label"):  # finished, but under other kwargs
        compare_agents.main(_argv(tmp_path, kwargs | {"ent_coef": 0.0}))


def test_the_default_is_the_configuration_the_arms_always_had():
    assert sb3_train.model_kwargs({}, max_epochs=25, num_envs=8) == {"n_steps": 25, "batch_size": 50}
    args = compare_agents.parse_args(["--arms", "maskable_flat"])
    assert args.sb3_kwargs == {} and compare_agents.slice_settings("maskable_flat", args)["sb3_kwargs"] == {}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"learning_rat": 1e-4}, r"key 'learning_rat' is not one .* expected keys among \['learning_rate', 'ent_coef'"),
    ({"n_steps": 7}, r"key 'n_steps' is not one"),  # set through rollout_episodes, never cut an episode
    ({"learning_rate": -1}, r"learning_rate=-1: expected a number > 0"),
    ({"rollout_episodes": 1.5}, r"rollout_episodes=1.5: expected an integer >= 1"),
    ({"normalize": "all"}, r"normalize='all': expected null or one of \['obs', 'reward', 'both'\]"),
    ([1], r"\[1\]: expected a JSON object"),
])
def test_an_unknown_key_or_a_bad_value_is_refused_by_name(kwargs, message, capsys):
    with pytest.raises(ValueError, match=message):
        sb3_train.check_sb3_kwargs(kwargs)
    with pytest.raises(SystemExit):
        compare_agents.parse_args(["--sb3-kwargs", json.dumps(kwargs)])
    assert "--sb3-kwargs" in capsys.readouterr().err


def test_the_normalisation_is_saved_restored_on_resume_and_frozen_for_evaluation(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    loaded, actors = [], []
    load = sb3_train.load_normalized

    def recording_load(path, env):
        norm = load(path, env)
        loaded.append(copy.deepcopy(_stats(norm)))
        return norm

    class RecordingActor(Sb3Actor):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            actors.append((self, copy.deepcopy(_stats(self.obs_norm))))

    monkeypatch.setattr(sb3_train, "load_normalized", recording_load)
    monkeypatch.setattr(sb3_train, "Sb3Actor", RecordingActor)
    kwargs = {"normalize": "both", "gamma": 0.9}
    compare_agents.main(_argv(tmp_path, kwargs, "--time-limit-s", "0"))
    saved = tmp_path / ENV / "maskable_flat" / "seed0.vecnorm.pkl"
    with saved.open("rb") as file:
        paused = _stats(pickle.load(file))
    assert paused["flags"] == (True, True, 0.9, 10.0)  # the model's gamma
    assert paused["obs"][2] > 1 and paused["ret"][2] > 1  # it has seen the first rollout
    compare_agents.main(_argv(tmp_path, kwargs, "--eval-sampled"))
    assert loaded == [paused]  # the resumed run starts from the saved statistics, whole
    assert len(actors) == 2 and not saved.exists()  # argmax and sampled; the state goes once the slice is written
    for actor, built in actors:
        assert actor.obs_norm.training is False and actor.obs_norm.norm_reward is False
        assert _stats(actor.obs_norm) == built  # evaluation did not move them
        assert built["obs"][2] > paused["obs"][2]  # training went on from the saved statistics
    slice_ = json.loads((tmp_path / ENV / "maskable_flat" / "seed0.json").read_text())
    assert len(slice_["sampled_episodes"]) == len(slice_["episodes"]) == 1


class _RecordingModel:
    """Stands in for a MaskablePPO model: records the observations it is asked to act on."""

    def __init__(self):
        self.seen = []

    def predict(self, obs, action_masks, deterministic):
        self.seen.append(np.array(obs))
        return np.zeros((len(obs), 5), np.int64), None


def test_the_actor_acts_on_observations_normalised_by_the_frozen_statistics():
    from stable_baselines3.common.vec_env import VecNormalize

    from esper_env.sb3 import make_sb3_env

    norm = VecNormalize(make_sb3_env(ENV, 2, flatten=False, **TINY), gamma=0.9)
    dim = norm.observation_space.shape[0]
    norm.obs_rms.mean, norm.obs_rms.var = np.full(dim, 2.0), np.full(dim, 4.0)
    with pytest.raises(ValueError, match="expected a frozen VecNormalize"):
        Sb3Actor(_RecordingModel(), flatten=False, num_slots=3, obs_norm=norm)
    frozen = sb3_train.frozen(norm)
    assert frozen is norm and (norm.training, norm.norm_reward) == (False, False)
    actor = Sb3Actor(_RecordingModel(), flatten=False, num_slots=3, obs_norm=frozen)
    obs = np.zeros((2, dim), np.float32)
    masks = SimpleNamespace(flat=np.ones((2, 21), bool))
    actor.act(obs, masks, np.ones(2, bool))
    assert np.allclose(actor.model.seen[0], -1.0)  # (0 - 2) / sqrt(4)
    assert norm.obs_rms.count == 1e-4  # acting did not update the statistics
    norm.close()
