"""What a Gymnasium user meets beyond step and reset: pickling, autoreset info, closing, spec, arguments, errors."""

from __future__ import annotations

import pickle

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import esper_env  # noqa: F401  (registers the ids)
from esper_env.spaces import Op

ID = "Esper-Synthetic-v0"
WAIT = np.zeros(5, dtype=np.int64)
GERMINATE = np.array([Op.GERMINATE, 1, 5, 0, 0], dtype=np.int64)
SERIALISERS = {"pickle": (pickle.dumps, pickle.loads), "cloudpickle": (cloudpickle.dumps, cloudpickle.loads)}


def _make(vector: bool, tiny: dict):
    return gym.make_vec(ID, num_envs=2, **tiny) if vector else gym.make(ID, **tiny)


def _trace(env, vector: bool, steps: int) -> list:
    out = []
    for t in range(steps):
        action = GERMINATE if t == 0 else WAIT
        obs, reward, _, _, info = env.step(np.stack([action, WAIT]) if vector else action)
        out.append((obs, reward, info["val_accuracy"], info["train_loss"]))
    return out


@pytest.mark.parametrize("serialiser", sorted(SERIALISERS))
@pytest.mark.parametrize("vector", [False, True], ids=["single", "vector"])
@pytest.mark.parametrize("after_reset", [False, True], ids=["before-reset", "after-reset"])
def test_a_pickled_env_continues_exactly_like_the_original(tiny, serialiser, vector, after_reset):
    """Each trainer's metrics are a view of the engine's shared buffer (and its learning rates a view of its
    controls): an unpickled copy whose views became separate tensors trained on, but reported the same accuracy
    forever (or 0.0, pickled before a reset)."""
    dumps, loads = SERIALISERS[serialiser]
    tiny["max_epochs"] = 4
    env = _make(vector, tiny)
    if after_reset:
        env.reset(seed=3)
        _trace(env, vector, 1)
    twin = loads(dumps(env))
    if not after_reset:
        env.reset(seed=3)
        twin.reset(seed=3)
    ours, theirs = _trace(env, vector, 3), _trace(twin, vector, 3)
    for a, b in zip(ours, theirs, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
    assert len({float(np.ravel(step[2])[0]) for step in ours} | {float(np.ravel(step[3])[0]) for step in ours}) > 2


def _flagged(info: dict, i: int) -> set[str]:
    return {key for key in info if not key.startswith("_") and info.get(f"_{key}", np.ones(2, bool))[i]}


def test_same_step_top_level_info_of_a_finished_sub_env_is_its_reset_info_as_in_sync_vector_env(tiny):
    """At the step that ends an episode, the top-level info of that sub-env describes only the new episode (masks
    and ``reset``), as Gymnasium's SyncVectorEnv lays it out; the finished episode's values are in final_info."""
    tiny["max_epochs"] = 2
    native = gym.make_vec(ID, num_envs=2, autoreset_mode="SameStep", **tiny)
    sync = gym.make_vec(ID, num_envs=2, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP}, **tiny)
    for envs in (native, sync):
        envs.reset(seed=0)
        envs.step(np.stack([GERMINATE, WAIT]))
    *_, truncated, info = native.step(np.stack([WAIT, WAIT]))
    *_, sync_truncated, sync_info = sync.step(np.stack([WAIT, WAIT]))
    assert truncated.all() and sync_truncated.all()
    assert _flagged(info, 0) == _flagged(sync_info, 0)
    assert {"val_accuracy", "epoch", "stage"}.isdisjoint(_flagged(info, 0))
    assert info["reset"].all() and info["reset"].dtype == sync_info["reset"].dtype == np.bool_
    final = info["final_info"]
    assert final["_val_accuracy"].all() and final["epoch"].tolist() == [2, 2]
    assert _flagged(final, 0) == _flagged(sync_info["final_info"], 0)
    np.testing.assert_array_equal(info["op_slot_mask"], native.unwrapped.op_slot_mask())  # the new episode's


def test_same_step_keeps_the_step_info_of_a_sub_env_that_did_not_finish(tiny):
    venv = gym.make_vec(ID, num_envs=2, autoreset_mode="SameStep", **tiny)
    venv.reset(seed=0)
    venv.step(np.stack([GERMINATE, WAIT]))
    venv.unwrapped.inject_fault(1, "nan_loss")
    _, _, terminated, _, info = venv.step(np.stack([WAIT, WAIT]))
    assert terminated.tolist() == [False, True]
    assert info["_val_accuracy"].tolist() == [True, False] and info["epoch"][0] == 2
    assert info["reset"].tolist() == [False, True]
    assert info["final_info"]["_rollback"].tolist() == [False, True] and info["final_info"]["rollback"][1]


@pytest.mark.parametrize("vector", [False, True], ids=["single", "vector"])
def test_step_and_reset_after_close_say_the_env_is_closed(tiny, vector):
    env = _make(vector, tiny)
    env.reset(seed=0)
    env.close()
    with pytest.raises(RuntimeError, match=r"step\(\) on a closed env"):
        env.step(np.stack([WAIT, WAIT]) if vector else WAIT)
    with pytest.raises(RuntimeError, match=r"reset\(\) on a closed env"):
        env.reset(seed=0)


def test_graph_captures_after_close_says_the_env_is_closed(tiny):
    venv = gym.make_vec(ID, num_envs=2, **tiny)
    assert venv.unwrapped.graph_captures == 0  # no CUDA graphs on the CPU
    venv.close()
    with pytest.raises(RuntimeError, match=r"^graph_captures on a closed env"):
        venv.unwrapped.graph_captures  # noqa: B018  (the property is what is tested)


def test_single_env_step_before_reset_or_after_its_episode_speaks_of_one_env(tiny):
    """The single env is a width-1 vector env underneath, whose refusal names sub-envs and reset_mask."""
    tiny["max_epochs"] = 2
    message = r"^step\(\) before reset\(\) or after the episode ended; call reset\(\)$"
    env = gym.make(ID, **tiny)
    with pytest.raises(RuntimeError, match=message):
        env.unwrapped.step(WAIT)  # gym.make's OrderEnforcing catches this case only before the first reset
    env.reset(seed=0)
    assert env.step(WAIT)[3] is False and env.step(WAIT)[3] is True  # truncated at max_epochs
    with pytest.raises(RuntimeError, match=message):
        env.step(WAIT)
    env.reset(seed=1)
    env.unwrapped.vector_env.inject_fault(0, "nan_loss")
    assert env.step(WAIT)[2] is True  # terminated by the rollback
    with pytest.raises(RuntimeError, match=message):
        env.step(WAIT)
    env.close()
    with pytest.raises(RuntimeError, match=r"^step\(\) on a closed env"):  # closed comes first
        env.step(WAIT)


def test_numpy_integers_are_taken_for_num_envs_and_the_vector_seed(tiny):
    venv = gym.make_vec(ID, num_envs=np.int64(2), **tiny)
    assert type(venv.num_envs) is int and venv.num_envs == 2
    with pytest.raises(ValueError, match=r"^num_envs=np.True_; expected an integer >= 1"):
        gym.make_vec(ID, num_envs=np.bool_(True), **tiny)
    reference = gym.make_vec(ID, num_envs=2, **tiny)
    venv.reset(seed=np.int64(3))
    reference.reset(seed=3)
    action = np.stack([GERMINATE, WAIT])
    np.testing.assert_array_equal(venv.step(action)[0], reference.step(action)[0])


@pytest.mark.parametrize(("action", "message"), [
    (np.zeros((2, 4), dtype=np.int64), r"^actions have shape \(2, 4\); expected \(2, 5\), one row of 5 values per "),
    (np.full((2, 5), np.nan), r"^actions \[\[nan, .*\]\] have dtype float64; expected integers"),
    (np.array([WAIT, [0, 0, 0, 3, 0]]), r"^action head 'blend' of sub-env 1 is 3; expected an integer in \[0, 3\)"),
])
def test_vector_action_errors_name_the_sub_env_and_the_batch_shape(tiny, action, message):
    venv = gym.make_vec(ID, num_envs=2, **tiny)
    venv.reset(seed=0)
    with pytest.raises(ValueError, match=message):
        venv.step(action)


def test_autoreset_mode_takes_gymnasiums_enum_and_is_refused_where_it_would_be_ignored(tiny):
    venv = gym.make_vec(ID, num_envs=2, autoreset_mode=AutoresetMode.SAME_STEP, **tiny)
    assert venv.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert '"autoreset_mode": "SameStep"' in venv.spec.to_json()
    with pytest.raises(TypeError, match=r"autoreset_mode='SameStep' is an argument of the vector env"):
        gym.make(ID, autoreset_mode="SameStep", **tiny)
    with pytest.raises(TypeError, match=r"vector_kwargs=\{'autoreset_mode'"):
        gym.make_vec(ID, num_envs=2, vectorization_mode="sync", autoreset_mode="SameStep", **tiny)


def test_the_spec_gives_the_episode_length_and_a_longer_or_shorter_time_limit_is_refused(tiny):
    env = gym.make(ID, **tiny)
    assert env.spec.max_episode_steps == tiny["max_epochs"]
    remade = gym.make(env.spec)  # the spec recreates the env, its TimeLimit at the episode's own length
    assert remade.spec.max_episode_steps == tiny["max_epochs"]
    assert gym.make_vec(env.spec, num_envs=2).unwrapped.config.max_epochs == tiny["max_epochs"]
    gym.make_vec(ID, num_envs=2, max_episode_steps=tiny["max_epochs"], **tiny)
    for steps in (3, 9):  # shorter or longer: the message holds for both
        with pytest.raises(ValueError, match=rf"^max_episode_steps={steps} differs from the episode length "
                                             r"max_epochs=6; expected None or 6"):
            gym.make_vec(ID, num_envs=2, max_episode_steps=steps, **tiny)


@pytest.mark.parametrize(("action", "message"), [
    (np.zeros(4, dtype=np.int64), r"^action has shape \(4,\); expected \(5,\)"),
    (np.zeros((1, 5), dtype=np.int64), r"^action has shape \(1, 5\); expected \(5,\)"),
    (np.array([0, 3, 0, 0, 0]), r"^action head 'slot' is 3; expected an integer in \[0, 3\)"),
    (np.array([0.0, np.nan, 0, 0, 0]), r"^action \[0.0, nan, 0.0, 0.0, 0.0\] has dtype float64; expected integers"),
])
def test_single_env_action_errors_speak_of_one_action(tiny, action, message):
    env = gym.make(ID, **tiny)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=message):
        env.step(action)
    env.step(WAIT)  # nothing changed: the env steps on


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"seed": True}, r"^seed=True; expected None or an integer >= 0"),
    ({"seed": -1}, r"^seed=-1; expected None or an integer >= 0"),
    ({"options": "abc"}, r"^options='abc'; expected None or a dict"),
    ({"options": {"reset_mask": np.array([True])}}, r"^unknown reset option\(s\) \['reset_mask'\]; the single env"),
])
def test_single_env_reset_errors_speak_of_one_env(tiny, kwargs, message):
    env = gym.make(ID, **tiny)
    with pytest.raises(ValueError, match=message):
        env.reset(**kwargs)
    env.reset(seed=np.int64(4), options={})


def test_vector_reset_options_must_be_a_dict(tiny):
    venv = gym.make_vec(ID, num_envs=2, **tiny)
    with pytest.raises(ValueError, match=r"^options='abc'; expected None or a dict"):
        venv.reset(options="abc")


def test_the_vector_env_has_the_single_envs_mask_methods(tiny):
    env, venv = gym.make(ID, **tiny), gym.make_vec(ID, num_envs=2, **tiny)
    _, info = env.reset(seed=0)
    _, vinfo = venv.reset(seed=0)
    for name in ("action_masks", "op_slot_mask", "blueprint_mask", "blend_mask"):
        single = env.get_wrapper_attr(name)()  # gym.make's wrappers do not forward the methods
        batched = getattr(venv.unwrapped, name)()
        np.testing.assert_array_equal(single, batched[0])
        key = "action_mask" if name == "action_masks" else name
        np.testing.assert_array_equal(batched, vinfo[key])
        np.testing.assert_array_equal(single, info[key])


def test_numpy_scalars_are_accepted_and_the_spec_stays_json(tiny):
    tiny.update(max_epochs=np.int64(3), host_lr=np.float32(0.5), host_widths=[np.int64(8), 8, 16],
                stage_potentials=list(np.linspace(0, 0.7, 8)), param_budget=np.int32(1000))
    for env in (gym.make(ID, **tiny), gym.make_vec(ID, num_envs=2, **tiny)):
        cfg = env.unwrapped.config
        assert type(cfg.max_epochs) is int and type(cfg.host_lr) is float and type(cfg.host_widths[0]) is int
        assert type(cfg.stage_potentials[1]) is float and type(cfg.param_budget) is int
        assert '"max_epochs": 3' in env.spec.to_json()


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"download": np.bool_(True)}, r"^download=np.True_ has type numpy.bool; expected bool"),
    ({"max_epochs": np.float64(3.0)}, r"^max_epochs=np.float64\(3.0\) has type numpy.float64; expected int"),
    ({"max_epochs": np.bool_(True)}, r"^max_epochs=np.True_ has type numpy.bool; expected int"),
])
def test_numpy_scalars_of_the_wrong_kind_are_refused(tiny, kwargs, error):
    with pytest.raises(TypeError, match=error):
        gym.make(ID, **{**tiny, **kwargs})


@pytest.mark.parametrize(("env_id", "dataset"), [("Esper-Synthetic-v0", "cifar10"),
                                                  ("Esper-CIFAR10-Fast-v0", "synthetic")])
def test_a_dataset_that_contradicts_the_id_is_refused_before_loading(tiny, env_id, dataset):
    expected = "synthetic" if dataset == "cifar10" else "cifar10"
    message = f"^dataset='{dataset}' contradicts the env id, whose images are '{expected}'"
    with pytest.raises(ValueError, match=message):
        gym.make(env_id, **tiny, dataset=dataset, data_dir="/nonexistent", download=False)
    with pytest.raises(ValueError, match=message):
        gym.make_vec(env_id, num_envs=2, **tiny, dataset=dataset, data_dir="/nonexistent", download=False)


def test_a_seeded_cpu_run_repeats_bit_for_bit_info_included(tiny):
    """What the spec's docstring promises for the CPU (the registered nondeterministic=True is for CUDA)."""
    def run() -> list:
        venv = gym.make_vec(ID, num_envs=2, **tiny)
        venv.reset(seed=5)
        plant = np.stack([GERMINATE, np.array([Op.GERMINATE, 2, 6, 2, 0])])  # one seed gated: every path runs
        return [venv.step(plant if t == 0 else np.stack([WAIT, WAIT])) for t in range(tiny["max_epochs"])]

    for a, b in zip(run(), run(), strict=True):
        for x, y in zip(a[:4], b[:4], strict=True):
            np.testing.assert_array_equal(x, y)
        assert a[4].keys() == b[4].keys()
        for key in a[4]:
            np.testing.assert_array_equal(a[4][key], b[4][key])  # NaN equals NaN here
