"""benchmarks/family_env_throughput.py: the env on the family host against the bare family, on the CPU (every
path but the CUDA graphs) and, marked, on a GPU."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from benchmarks import family_env_throughput as bench
from esper_agent.distributions import ActionMasks
from esper_env.architecture import Architecture, param_count, widen_extra
from esper_env.blueprints import FAMILY_BLUEPRINTS
from esper_env.family_host import FamilyHost
from esper_env.spaces import Head, Op, head_sizes

FAMILY = {b.name: i for i, b in enumerate(FAMILY_BLUEPRINTS)}
TINY = {"synthetic_train_size": 128, "synthetic_val_size": 32, "synthetic_test_size": 32, "synthetic_image_size": 8,
        "batch_size": 32, "eval_batch_size": 32, "train_images_per_epoch": 64, "max_widths": [16, 40, 40],
        "min_training_epochs": 1, "collapse_patience": 0}
"""A family env whose step takes milliseconds and whose seeds can join within 7 epochs."""


def _run(tmp_path: Path, device: str, num_envs: str = "2") -> dict:
    out = tmp_path / "t.json"
    bench.main(["--device", device, "--num-envs", num_envs, "--steps", "1", "--epochs", "7", "--warmup", "1",
                "--baseline-batches", "2", "--env-kwargs", json.dumps(TINY), "--out", str(out)])
    return json.loads(out.read_text())


def test_every_case_runs_on_the_cpu_against_the_plain_loop(tmp_path: Path) -> None:
    result = _run(tmp_path, "cpu")
    assert result["device"].startswith("cpu") and result["torch"] == torch.__version__
    assert result["env"] == "Esper-Synthetic-v0" and result["env_kwargs"]["host"] == "family"
    rows = {(r["runner"], r["case"]): r for r in result["rows"]}
    assert set(rows) == {(runner, case) for runner in ("env", "plain") for case in bench.CASES}  # no graphs on CPU
    for case in bench.CASES:
        env, steps = rows[("env", case)], 7 if case in bench.GROWTH_CASES else 1
        assert env["steps"] == steps and env["images"] == 2 * steps * 64  # every sub-env trains every step
        assert env["images_per_s"] == pytest.approx(env["images"] / env["seconds"])
        assert rows[("plain", case)]["images_per_s"] > 0
    grow = rows[("env", "grow")]
    assert grow["ops"]["fossilize"] > 0 and grow["architectures"] > 1  # seeds joined, shapes changed
    assert grow["changes_s"] > 0 and grow["capture_s"] == 0  # its joins took time; nothing is captured on a CPU
    assert rows[("plain", "grow")]["steps"] == 7 * 2  # the growth replay: every step's two batches
    assert rows[("plain", "seedling")]["steps"] == 2  # the WAIT cases: --baseline-batches
    largest = rows[("plain", "largest")]["arch"]
    assert largest == {"widths": [16, 40, 40], "blocks": [0, 1, 1]}  # the config's largest, not the default's
    for ratio in result["ratios"]:
        assert ratio["env_over_plain"] > 0 and ratio["env_over_graphs"] is None
    table = (tmp_path / "t.md").read_text()
    assert "| 2 | grow |" in table and "Goal" not in table  # the goal needs graphs at 8 sub-envs


def test_the_grow_actor_fossilizes_first_then_germinates_at_the_fastest_tempo() -> None:
    sizes = head_sizes(3)
    op_slot = np.zeros((3, len(Op), 3), bool)
    op_slot[:, Op.WAIT] = True
    op_slot[0, Op.FOSSILIZE, 1] = op_slot[0, Op.GERMINATE, 0] = True
    op_slot[1, Op.GERMINATE, 2] = True
    blueprint = np.zeros((3, 3, sizes[Head.BLUEPRINT]), bool)
    blueprint[1, 2, FAMILY["widen_s"]] = True
    blend = np.zeros((*blueprint.shape, sizes[Head.BLEND]), bool)
    blend[1, 2, FAMILY["widen_s"], 1] = True
    masks = ActionMasks(op_slot, np.ones((3, sum(sizes)), bool), blueprint, blend)
    actions = bench.GrowActor(sizes).act(np.zeros((3, 4)), masks, np.zeros(3, bool))
    assert actions[0, Head.OP] == Op.FOSSILIZE and actions[0, Head.SLOT] == 1
    assert actions[1].tolist() == [Op.GERMINATE, 2, FAMILY["widen_s"], 1, 0]  # tempo 0: the fastest blend
    assert actions[2].tolist() == [0] * len(sizes)  # WAIT


def test_the_trained_architecture_counts_live_seeds_as_joined() -> None:
    host = FamilyHost(Architecture(), num_classes=10, in_channels=3)
    host.plant(1, FAMILY["widen_l"], gated=False)
    host.plant(2, FAMILY["deepen"], gated=False)
    arch = bench.trained_architecture(host)
    assert arch == Architecture((16, 32 + widen_extra(32, "widen_l"), 32), (0, 0, 1))
    assert param_count(arch) == sum(p.numel() for p in host.parameters())  # same weights, hence same work


def test_the_log_holds_what_each_step_trains_after_its_action() -> None:
    envs = gym.make_vec("Esper-Synthetic-v0", num_envs=1, vectorization_mode="vector_entry_point", host="family",
                        device="cpu", max_epochs=3, autoreset_mode="SameStep", **TINY)
    log = bench.record_architectures(envs)
    envs.reset(seed=0)
    plant = np.zeros((1, len(Head)), np.int64)
    plant[0, [Head.OP, Head.SLOT, Head.BLUEPRINT]] = Op.GERMINATE, 2, FAMILY["deepen"]
    envs.step(plant)
    envs.step(np.zeros_like(plant))
    assert log == [[Architecture((16, 32, 32), (0, 0, 1))]] * 2  # the seed trains in the step that plants it
    envs.close()


def test_ratios_and_the_goal_line() -> None:
    rows = [{"runner": "env", "num_envs": 8, "case": "random", "images_per_s": 60.0, "ops": {}, "graph_captures": 3,
             "step_s": 2.0, "outside_engine_s": 0.1, "batch": 4, "batches_per_step": 2, "image_size": 8},
            {"runner": "graphs", "num_envs": 8, "case": "random", "images_per_s": 100.0}]
    ratios = bench.ratios(rows)
    assert ratios == [{"num_envs": 8, "case": "random", "env_over_plain": None, "env_over_graphs": 0.6}]
    result = {"device": "d", "torch": "t", "env": "e", "episode_epochs": 3, "rows": rows, "ratios": ratios}
    assert "Goal (random growth, 8 sub-envs, env / graphs >= 0.70): 0.60, not met." in bench.markdown(result)


def test_an_unknown_env_id_is_refused_by_name() -> None:
    args = argparse.Namespace(env="Esper-Nope-v0", data_dir=None, device="cpu", epochs=None, train_images=None,
                              env_kwargs="{}")
    with pytest.raises(ValueError, match="Esper-Nope-v0.*expected one of"):
        bench.env_setup(args)


@pytest.mark.gpu
def test_on_a_gpu_every_case_has_its_bare_graphs(tmp_path: Path) -> None:
    result = _run(tmp_path, "cuda")
    rows = {(r["runner"], r["case"]): r for r in result["rows"]}
    assert {case for runner, case in rows if runner == "graphs"} == set(bench.CASES)
    assert {case for runner, case in rows if runner == "plain"} == {"seedling", "largest"}
    assert rows[("env", "grow")]["graph_captures"] > 0
    assert rows[("graphs", "grow")]["captures"] > 2  # the replay captured again where the shapes changed
    assert all(r["env_over_graphs"] > 0 for r in result["ratios"])
