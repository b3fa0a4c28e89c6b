"""The paired read of trained policies against a baseline on one hidden condition (esper_agent.evaluate's files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.studies import condition_read
from esper_agent import evaluate

TINY = {"device": "cpu", "batch_size": 64, "synthetic_train_size": 256, "synthetic_val_size": 128,
        "synthetic_image_size": 16, "max_epochs": 6, "report_test_accuracy": True}


def _evaluate(tmp_path: Path, policy: str, seed: int = 7, episodes: int = 3) -> Path:
    out = tmp_path / f"{policy}-{seed}-{episodes}.md"
    assert evaluate.main(["--policy", policy, "--env", "Esper-Synthetic-v0", "--env-kwargs", json.dumps(TINY),
                          "--num-envs", "3", "--episodes", str(episodes), "--seed", str(seed), "--output", str(out),
                          "--report-dir", str(tmp_path / f"{policy}-{seed}-{episodes}.eval")]) == 0
    return out.with_suffix(".json")


def test_a_policy_pairs_episode_by_episode_with_the_baseline(tmp_path: Path) -> None:
    static, heuristic = _evaluate(tmp_path, "static"), _evaluate(tmp_path, "heuristic")
    out = tmp_path / "read.md"
    assert condition_read.main([str(static), str(heuristic), str(static), "--out", str(out)]) == 0
    reference, run = json.loads(static.read_text()), json.loads(heuristic.read_text())
    row = condition_read.paired_row(reference, run, "heuristic")
    by_env = {e["env"]: e for e in reference["episodes"]}
    expected = [100 * (e["episode_return"] - by_env[e["env"]]["episode_return"]) for e in run["episodes"]]
    assert row["return"][0] == pytest.approx(sum(expected) / 3)
    itself = condition_read.paired_row(reference, reference, "static")
    assert itself["test"] == (0.0, 0.0) and itself["fates"] == "0.0 / 0.0 / 0.0 (0.0 timed out)"  # never plants
    assert sum(e["seeds"]["planted"] for e in run["episodes"]) > 0 and row["fates"] != itself["fates"]
    table = out.read_text()
    assert "| static (reference) | 3 |" in table and "| heuristic-7-3 | 3 |" in table
    assert "| static-7-3 | 3 |" in table and "+0.00 ± 0.00" in table


def test_runs_that_would_not_pair_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    static = _evaluate(tmp_path, "static")
    with pytest.raises(SystemExit):
        condition_read.main([str(static), str(_evaluate(tmp_path, "heuristic", seed=8))])
    assert "differs from the reference in {'seed': (7, 8)}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        condition_read.main([str(static), str(_evaluate(tmp_path, "heuristic", episodes=6))])
    assert "expected one episode on each of its 3" in capsys.readouterr().err


def _run(policy: str, returns: list[float], tests: list[float | None], **settings: object) -> dict:
    episodes = [{"env": k, "episode_return": r, "test_accuracy": t, "rollback": False,
                 "seeds": {"planted": 1, "fossilized": 0, "pruned": 1, "holding_timeouts": 1, "rolled_back": 0}}
                for k, (r, t) in enumerate(zip(returns, tests, strict=True))]
    return {"policy": policy, "env_id": "E", "env_kwargs": {"condition": "c"}, "num_envs": len(returns), "seed": 7,
            "episodes": episodes, **settings}


def test_episodes_pair_by_sub_env_whatever_their_order_in_the_file() -> None:
    reference = _run("static", [0.5, 0.4, 0.6], [0.50, 0.40, 0.60])
    run = _run("checkpoint", [0.6, 0.3, 0.9], [0.55, None, 0.70])
    row = condition_read.paired_row(reference, run, "p")
    run["episodes"].reverse()
    assert condition_read.paired_row(reference, run, "p") == row
    assert row["return"][0] == pytest.approx((10 - 10 + 30) / 3)
    assert row["test"][0] == pytest.approx((5 + 10) / 2)  # the episode without a test accuracy drops out
    assert row["fates"] == "0.0 / 0.0 / 1.0 (1.0 timed out)"  # per episode, as pilot_paired counts them
    for e in run["episodes"]:
        del e["seeds"]  # a results file of an env without timelines
    assert "fates" not in condition_read.paired_row(reference, run, "p")


def test_files_that_are_not_evaluate_results_are_refused(tmp_path: Path) -> None:
    reference = _run("static", [0.5, 0.4], [0.5, 0.4])
    with pytest.raises(ValueError, match=r"differs from the reference in \{'env_kwargs'"):
        condition_read.paired_row(reference, _run("checkpoint", [0.5, 0.4], [0.5, 0.4], env_kwargs={}), "p")
    old = tmp_path / "old.json"
    old.write_text(json.dumps({k: v for k, v in reference.items() if k != "env_kwargs"}))
    with pytest.raises(ValueError, match=r"lacks \['env_kwargs'\]"):
        condition_read.load_run(old)
    with pytest.raises(ValueError, match="did that run finish"):
        condition_read.load_run(tmp_path / "missing.json")
