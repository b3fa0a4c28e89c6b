"""screen_compare: new − base per (arm, condition), paired by reset seed, on hand-made slices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import screen_compare
from esper_agent.evaluate import mean_ci95


def _write(folder: Path, arm: str, tests: dict[int, float], *, condition: str = "full", env: str = "E",
           plan: list | None = None) -> None:
    folder.mkdir(exist_ok=True)
    with (folder / f"{arm}-{condition}.jsonl").open("a") as f:
        for seed, test in tests.items():
            f.write(json.dumps({"arm": arm, "kind": "plan", "twin": None, "plan": plan or [[0, "widen_s", 0]],
                                "condition": condition, "seed": seed, "env_id": env, "test_accuracy": test,
                                "return": test - 0.1}) + "\n")


def test_differences_are_paired_by_reset_seed_over_the_seeds_both_ran(tmp_path: Path, capsys) -> None:
    new, base = tmp_path / "new", tmp_path / "base"
    _write(new, "grow", {0: 0.80, 1: 0.71, 2: 0.92, 7: 0.5})  # seed 7 has no partner
    _write(base, "grow", {2: 0.90, 1: 0.70, 0: 0.80, 3: 0.6})
    _write(base, "static", {0: 0.5})  # only in the base: not compared
    assert screen_compare.main([str(new), str(base), "--out", str(tmp_path / "c.md")]) == 0
    (row,) = screen_compare.compare(*(screen_compare.by_run(screen_compare.load(f)) for f in (new, base)))
    mean, ci = mean_ci95([0.0, 1.0, 2.0])  # points: seeds 0, 1, 2
    assert row["seeds"] == [0, 1, 2] and row["test_minus_base"] == pytest.approx(mean)
    assert row["test_ci95"] == pytest.approx(ci) and row["return_minus_base"] == pytest.approx(mean)
    assert "| grow | full | 3 | +1.00 ± " in capsys.readouterr().out
    assert (tmp_path / "c.md").read_text().count("| grow |") == 1


def test_other_plans_or_envs_are_refused(tmp_path: Path) -> None:
    new, base = tmp_path / "new", tmp_path / "base"
    _write(new, "grow", {0: 0.8}, plan=[[0, "widen_l", 0]])
    _write(base, "grow", {0: 0.8})
    with pytest.raises(ValueError, match="other plans"):
        screen_compare.main([str(new), str(base)])
    other = tmp_path / "other"
    _write(other, "grow", {0: 0.8}, env="F", plan=[[0, "widen_l", 0]])
    with pytest.raises(SystemExit, match="different envs"):
        screen_compare.main([str(new), str(other)])
