"""Smoke tests of examples/train_ppo.py and benchmarks/studies/agent_vs_random.py with tiny budgets."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import toy_env
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)

from benchmarks.common import child_env, json_safe

ROOT = Path(__file__).resolve().parents[2]
HAS_ESPER_VECTOR_ENV = importlib.util.find_spec("esper_env.vector_env") is not None
needs_esper = pytest.mark.skipif(not HAS_ESPER_VECTOR_ENV, reason="esper_env.vector_env is not there yet")


def load_benchmark() -> object:
    spec = importlib.util.spec_from_file_location("agent_vs_random",
                                                  ROOT / "benchmarks" / "studies" / "agent_vs_random.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_esper
def test_train_ppo_example_runs() -> None:
    env = child_env(OMP_NUM_THREADS="1")  # one thread: see agent_fixtures.py
    result = subprocess.run([sys.executable, "examples/train_ppo.py", "--updates", "2", "--num-envs", "2",
                             "--max-epochs", "3", "--device", "cpu"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "update 2: return" in result.stdout


def test_benchmark_on_the_toy_env(tmp_path: Path) -> None:
    report = load_benchmark().main([
        "--env", f"{toy_env.__name__}:{toy_env.ENV_ID}", "--updates", "2", "--seeds", "0", "1", "2",
        "--num-envs", "4", "--episodes", "4", "--device", "cpu", "--out", str(tmp_path),
        "--agent-config", json.dumps({"rollout_steps": 8, "hidden_size": 16})])
    # "agent" plays argmax by default; the same policy's sampled play is reported beside it
    assert set(report["summary"]) == {"agent", "agent_sampled", "random", "static"}
    mean, half = report["summary"]["random"]["episode_return"]
    assert mean < 0.1 and half >= 0  # the random-valid policy often prunes: -0.5 per termination
    written = json.loads(next(tmp_path.glob("agent_vs_random_*.json")).read_text())
    assert written["device_name"] and len(written["per_seed"]) == 3


def test_benchmark_keeps_each_seed_and_a_rerun_reuses_them(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    args = ["--env", f"{toy_env.__name__}:{toy_env.ENV_ID}", "--updates", "1", "--seeds", "0", "1", "2",
            "--num-envs", "2", "--episodes", "2", "--device", "cpu", "--out", str(tmp_path),
            "--agent-config", json.dumps({"rollout_steps": 8, "hidden_size": 16})]
    benchmark = load_benchmark()
    first = benchmark.main(args)
    assert len(list(tmp_path.glob("agent_vs_random_slices/*/seed*.json"))) == 3
    capsys.readouterr()
    second = benchmark.main(args[:8] + ["3"] + args[8:])  # one more seed: three reused, one trained
    assert "seeds [0, 1, 2] reused" in capsys.readouterr().out
    assert json.dumps(second["per_seed"][:3]) == json.dumps(json_safe(first["per_seed"]))
    assert len(list(tmp_path.glob("agent_vs_random_slices/*/seed*.json"))) == 4


@needs_esper
def test_benchmark_trains_seeds_in_parallel_processes(tmp_path: Path) -> None:
    kwargs = {"max_epochs": 2, "device": "cpu", "synthetic_train_size": 128, "synthetic_val_size": 64,
              "batch_size": 64}
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", "benchmarks.studies.agent_vs_random", "--updates", "1", "--seeds",
                             "0", "1", "2", "--num-envs", "2", "--episodes", "2", "--device", "cpu", "--jobs", "2",
                             "--threads", "1", "--env-kwargs", json.dumps(kwargs), "--out", str(tmp_path)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    report = json.loads(next(tmp_path.glob("agent_vs_random_*.json")).read_text())
    assert [s["seed"] for s in report["per_seed"]] == [0, 1, 2]


def test_benchmark_refuses_fewer_than_three_seeds(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="at least 3 seeds"):
        load_benchmark().main(["--seeds", "0", "1", "--out", str(tmp_path)])


@needs_esper
def test_benchmark_smoke_on_esper_synthetic(tmp_path: Path) -> None:
    report = load_benchmark().main([
        "--updates", "1", "--seeds", "0", "1", "2", "--num-envs", "2", "--episodes", "2", "--device", "cpu",
        "--env-kwargs", json.dumps({"max_epochs": 2, "device": "cpu"}), "--out", str(tmp_path)])
    assert report["env"] == "Esper-Synthetic-v0"
    for arm in ("agent", "random", "static"):
        assert len(report["per_seed"][0]["arms"][arm]) == 2

