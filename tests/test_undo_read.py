"""The undo screen's read: paired decisions per condition, the informed choice, what the policy saw."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.studies import undo_read

PLANS = {"agent-plan@1": [[1, "germinate", 2, "deepen"]], "agent-plan@1-fossilize@6": [[6, "fossilize", 2, None]],
         "agent-plan@1-prune@6": [[6, "prune", 2, None]], "static-seedling": []}


def _row(arm: str, condition: str, seed: int, test: float, train_at_5: float | None = None) -> dict:
    curve = [0.1 * k for k in range(8)]
    return {"arm": arm, "kind": "static" if arm == "static-seedling" else "plan", "twin": None,
            "plan": PLANS[arm], "condition": condition, "seed": seed, "env_id": "Esper-CIFAR10-v0",
            "return": test - 0.1, "test_accuracy": test, "val_curve": curve,
            "train_curve": None if train_at_5 is None else [*curve[:5], train_at_5, *curve[6:]]}


def _folder(tmp_path: Path) -> Path:
    # "costs": keeping loses 5 points against pruning; "pays": keeping gains 4; seed 1 offsets every arm alike
    tests = {"costs": {"static-seedling": 0.50, "agent-plan@1": 0.45, "agent-plan@1-fossilize@6": 0.45,
                       "agent-plan@1-prune@6": 0.50},
             "pays": {"static-seedling": 0.70, "agent-plan@1": 0.75, "agent-plan@1-fossilize@6": 0.74,
                      "agent-plan@1-prune@6": 0.70}}
    lines = [_row(arm, condition, seed, test + 0.01 * seed,
                  train_at_5=(0.9 if condition == "costs" else 0.4) + 0.02 * seed)
             for condition, arms in tests.items() for arm, test in arms.items() for seed in (0, 1)]
    lines.append(_row("agent-plan@1", "pool2k", 0, 0.6))  # a condition without every arm is left out
    folder = tmp_path / "Esper-CIFAR10-v0"
    folder.mkdir()
    (folder / "undo-0.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return folder


def test_the_read_pairs_the_decisions_and_picks_per_condition(tmp_path: Path) -> None:
    text = undo_read.report(_folder(tmp_path))
    assert "| costs | 2 | 50.50 | 45.50 | +0.00 ± 0.00 | +5.00 ± 0.00 | prune | +5.00 ± 0.00 | +0.00 ± 0.00 |" in text
    assert "| pays | 2 | 70.50 | 75.50 | -1.00 ± 0.00 | -4.00 ± 0.00 | keep | -1.00 ± 0.00 | +4.00 ± 0.00 |" in text
    assert "pool2k" not in text
    assert "informed − asap: +2.00 ± 0.00 (2 seeds)" in text  # (+5 - 1) / 2 on both seeds
    # the features before the decision (mean and range over episodes), the largest training − validation gap last
    pays = "| pays | 50.0 (50.0 to 50.0) | 41.0 (40.0 to 42.0) | -9.0 (-10.0 to -8.0) | -4.00 |"
    costs = "| costs | 50.0 (50.0 to 50.0) | 91.0 (90.0 to 92.0) | +41.0 (+40.0 to +42.0) | +5.00 |"
    assert text.index(pays) < text.index(costs)


def test_a_folder_without_the_undo_arms_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "Esper-CIFAR10-v0"
    folder.mkdir()
    (folder / "x.jsonl").write_text(json.dumps(_row("static-seedling", "full", 0, 0.5)) + "\n")
    with pytest.raises(SystemExit, match="no condition has all four arms"):
        undo_read.report(folder)


COMMITTED = Path(__file__).resolve().parents[1] / "benchmarks/results/screen_undo_all/Esper-CIFAR10-v0"


@pytest.mark.skipif(not COMMITTED.exists(), reason="the committed undo screen is not in this checkout")
def test_the_committed_read_is_what_the_study_computes() -> None:
    assert undo_read.report(COMMITTED) == (COMMITTED / "undo_read.md").read_text(), (
        "rebuild it: python -m benchmarks.studies.undo_read <folder> --out <folder>/undo_read.md")
