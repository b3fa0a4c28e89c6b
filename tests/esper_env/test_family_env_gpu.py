"""On a GPU: the family host grows through joins under CUDA graphs (re-captured at each join) as it does
eagerly, with and without the weights' moving average, and a reset after growth starts the seedling again."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from test_family_env import FAMILY, _grow

import esper_env  # noqa: F401
from esper_env.architecture import Architecture

pytestmark = pytest.mark.gpu

KWARGS = {
    "device": "cuda", "host": "family", "synthetic_train_size": 4096, "synthetic_val_size": 1024,
    "synthetic_image_size": 32, "max_epochs": 12, "batch_size": 256, "host_lr": 0.2, "seed_lr": 0.4,
    "lr_schedule": "wsd", "label_smoothing": 0.2, "crop_pad": 2, "param_penalty": 0.0, "min_training_epochs": 1,
    "one_seed_incubating": False, "flops_price": 0.02, "params_price": 0.01, "collapse_patience": 0,
    "fossilize_min_contribution": -100.0,
}
ACCURACY_TOLERANCE = 0.05  # bf16 and cuDNN's autotuner: eager and graph runs drift apart a little


@pytest.fixture
def opened() -> list:
    """Envs a test opens, closed after it: an open graph engine keeps cuBLAS's workspaces for every later env
    (``Engine.close``), which the engine's memory tests would see."""
    envs: list = []
    yield envs
    for env in envs:
        env.close()


def _run(execution: str, opened: list, **overrides) -> tuple[list[dict], object]:
    envs = gym.make_vec("Esper-Synthetic-v0", num_envs=3, execution=execution, **{**KWARGS, **overrides})
    opened.append(envs)
    _, info = envs.reset(seed=5)
    trace = []
    for _ in range(KWARGS["max_epochs"]):
        actions = np.concatenate([_grow({k: v[i:i + 1] for k, v in info.items() if isinstance(v, np.ndarray)},
                                        blueprint, slot) for i, (blueprint, slot) in enumerate(
                                            [(FAMILY["widen_l"], 1), (FAMILY["widen_s"], 2), (FAMILY["deepen"], 2)])])
        _, reward, _, _, info = envs.step(actions)
        trace.append({"acc": info["val_accuracy"].copy(), "stage": info["stage"].copy(), "params": info["params"],
                      "reward": reward})
    return trace, envs


@pytest.mark.parametrize("ema_epochs", [0.0, 1.0])  # with the weights' average: updated and swapped in graphs
def test_graphs_and_eager_grow_the_same_networks(opened: list, ema_epochs: float) -> None:
    eager, _ = _run("eager", opened, ema_epochs=ema_epochs)
    graph, envs = _run("graph", opened, ema_epochs=ema_epochs)
    for e, g in zip(eager, graph, strict=True):
        assert np.array_equal(e["stage"], g["stage"]) and np.array_equal(e["params"], g["params"])
        assert np.all(np.abs(e["acc"] - g["acc"]) <= ACCURACY_TOLERANCE)
        assert np.all(np.isfinite(g["reward"]))
    archs = [t.model.arch for t in envs.unwrapped._engine.trainers]
    assert archs[0].widths == (16, 128, 32) and archs[1].widths[2] >= 64 and archs[2].blocks[2] == 1
    assert envs.unwrapped.graph_captures >= 6  # every join re-captures the training and validation graphs
    assert graph[-1]["acc"].min() > 0.2  # it learned


def test_a_reset_after_growth_starts_the_seedling_again_on_the_gpu(opened: list) -> None:
    _, envs = _run("graph", opened)
    envs.reset(seed=6)
    _, reward, _, _, info = envs.step(np.zeros((3, 5), np.int64))
    assert all(t.model.arch == Architecture() for t in envs.unwrapped._engine.trainers)
    assert np.all(np.isfinite(reward)) and np.all(info["params"] == info["params_reference"])
