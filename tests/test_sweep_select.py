"""The head-to-head's selection rule on hand-made sweep slices: each learner keeps its configuration with the best
score (the better of the argmax and sampled mean returns), and a sweep that did not give every learner the same
chance is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import sweep_select


def _episodes(seed: int, ret: float) -> list[dict]:
    return [{"env_seed": 100_000 + 10 * seed + i, "return": ret + 0.01 * i, "val_accuracy": 0.5,
             "test_accuracy": 0.5, "seed_params": 0.0, "rollback": False, "length": 20, "invalid_rate": 0.0}
            for i in range(2)]


def _slice(arm: str, seed: int, argmax: float, sampled: float | None, budget: int = 8000, **kwargs) -> dict:
    out = {"arm": arm, "seed": seed, "episodes": _episodes(seed, argmax), "budget_host_epochs": budget,
           "env": "Esper-CIFAR10-Fast-v0", "env_kwargs": {}, "horizon": "terminal", "train_seconds": 0.0,
           "eval_seconds": 1.0, "device": "cpu", "curve": [], **kwargs}
    if sampled is not None:
        out |= {"sampled_episodes": _episodes(seed, sampled), "sampled_eval_seconds": 1.0}
    return out


def _write(folder: Path, name: str, slices: list[dict]) -> None:
    (folder / name).mkdir(parents=True, exist_ok=True)
    for s in slices:
        (folder / name / f"seed{s['seed']}.json").write_text(json.dumps(s))


def _sweep(folder: Path, **budget_of: int) -> None:
    """Two configurations per learner on seeds 100 and 101, plus a fixed arm the rule must ignore."""
    for name, argmax, sampled in (("esper_agent-a", 0.50, 0.53), ("esper_agent-b", 0.52, 0.51),
                                  ("maskable_flat-a", 0.49, None), ("maskable_flat-b", 0.48, 0.47)):
        budget = budget_of.get(name.replace("-", "_"), 8000)
        _write(folder, name, [_slice(name.split("-")[0], seed, argmax, sampled, budget,
                                     agent_kwargs={"label": name}) for seed in (100, 101)])
    _write(folder, "heuristic", [_slice("heuristic", seed, 0.90, None) for seed in (100, 101)])


def test_each_learner_keeps_its_best_configuration_scored_by_the_better_evaluation(tmp_path):
    _sweep(tmp_path)
    sweep_select.main([str(tmp_path)])
    selection = json.loads((tmp_path / "selection.json").read_text())
    # esper_agent-a: argmax 50.5 (mean of 0.50/0.51 per episode), sampled 53.5 -> 53.5 beats b's 52.5
    assert selection["chosen"] == {"esper_agent": "esper_agent-a", "maskable_flat": "maskable_flat-a"}
    by_name = {c["configuration"]: c for c in selection["configurations"]}
    assert by_name["esper_agent-a"]["score"] == pytest.approx(53.5)
    assert by_name["esper_agent-a"]["scored_by"] == "sampled"
    assert by_name["esper_agent-b"]["score"] == pytest.approx(52.5)
    # a configuration some of whose seeds were not evaluated sampled is scored on argmax alone
    assert by_name["maskable_flat-a"]["sampled_return"] is None
    assert by_name["maskable_flat-a"]["score"] == pytest.approx(49.5)
    assert "heuristic" not in by_name and selection["unfair"] == []
    assert "**esper_agent-a**" in (tmp_path / "selection.md").read_text()


def test_an_unequal_sweep_is_refused_unless_allowed_and_then_says_why(tmp_path):
    _sweep(tmp_path, esper_agent_b=16000)
    _write(tmp_path, "maskable_flat-c", [_slice("maskable_flat", seed, 0.40, None) for seed in (100, 101)])
    with pytest.raises(SystemExit, match="budget_host_epochs"):
        sweep_select.main([str(tmp_path)])
    assert not (tmp_path / "selection.json").exists()
    sweep_select.main([str(tmp_path), "--allow-unequal"])
    text = (tmp_path / "selection.md").read_text()
    assert "Not a fair sweep" in text and "unequal numbers of configurations" in text


def test_a_folder_without_learners_is_refused(tmp_path):
    _write(tmp_path, "heuristic", [_slice("heuristic", 0, 0.5, None)])
    with pytest.raises(SystemExit, match="no learner slices"):
        sweep_select.main([str(tmp_path)])
