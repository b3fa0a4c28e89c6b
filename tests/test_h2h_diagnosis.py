"""The head-to-head diagnosis: its rank correlation, and its report on the committed campaign it was written for."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks.studies import h2h_diagnosis

FOLDER = Path(__file__).resolve().parents[1] / "benchmarks/results/h2h_v2/Esper-CIFAR10-v0"


def test_ranks_share_ties_and_spearman_reads_order_only() -> None:
    assert h2h_diagnosis.ranks([3.0, 1.0, 3.0, 2.0]) == [2.5, 0.0, 2.5, 1.0]
    assert h2h_diagnosis.spearman([1, 2, 3, 4], [10, 20, 30, 1000]) == pytest.approx(1.0)
    assert h2h_diagnosis.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(h2h_diagnosis.spearman([5, 5, 5], [1, 2, 3]))  # an arm that never grows: no order to read


def test_paired_on_compares_the_same_reset_seed_under_the_condition_only() -> None:
    learner = [{"env_seed": 1, "condition": "a", "test_accuracy": 0.50}, {"env_seed": 2, "condition": "b",
                                                                           "test_accuracy": 0.90},
               {"env_seed": 3, "condition": "a", "test_accuracy": 0.70}]
    seedling = [{"env_seed": 1, "test_accuracy": 0.55}, {"env_seed": 2, "test_accuracy": 0.10},
                {"env_seed": 3, "test_accuracy": 0.60}]
    assert h2h_diagnosis.paired_on(learner, seedling, "a") == pytest.approx([-5.0, 10.0])


@pytest.mark.skipif(not FOLDER.exists(), reason="the committed h2h_v2 campaign is not in this checkout")
def test_the_committed_diagnosis_is_what_the_study_computes() -> None:
    text = h2h_diagnosis.report(FOLDER, "esper_agent-e3", "pool5k-noise40")
    assert text == (FOLDER / "diagnosis.md").read_text(), (
        "rebuild it: python -m benchmarks.studies.h2h_diagnosis <folder> --out <folder>/diagnosis.md")


@pytest.mark.skipif(not FOLDER.exists(), reason="the committed h2h_v2 campaign is not in this checkout")
def test_growth_arms_missing_from_the_campaign_are_named() -> None:
    with pytest.raises(SystemExit, match=r"growth arms \['static_huge'\] have no slices"):
        h2h_diagnosis.report(FOLDER, "esper_agent-e3", "pool5k-noise40", growth_arms=("static_huge",))


def test_keep_window_pairs_curves_by_reset_seed_and_counts_keeps_after_the_epoch_they_follow() -> None:
    def row(seed: int, condition: str, curve: list[float], ops: list | None = None) -> dict:
        contribution = [[float(10 * k + slot) for slot in range(2)] for k in range(len(curve))]
        return {"env_seed": seed, "condition": condition, "ops": ops or [],
                "record": {"val_accuracy": curve, "contribution": contribution}}
    learner = [row(1, "a", [0.2, 0.5, 0.4], [[1, "germinate", 0, "x"], [2, "fossilize", 0, None]]),
               row(2, "a", [0.4, 0.7, 0.6], [[2, "fossilize", 1, None]]), row(3, "b", [0.9, 0.9, 0.9]),
               row(9, "a", [0.0, 0.0, 0.0], [[1, "fossilize", 0, None]])]  # no seedling episode: left out
    seedling = [row(1, "a", [0.1, 0.3, 0.5]), row(2, "a", [0.3, 0.5, 0.7]), row(3, "b", [0.0, 0.0, 0.0])]
    lines = h2h_diagnosis.keep_window(learner, seedling, "a")
    assert lines[2:5] == ["| 1 | 30.0 | 20.0 | +10.0 | 0 |", "| 2 | 60.0 | 40.0 | +20.0 | 2 |",
                          "| 3 | 50.0 | 60.0 | -10.0 | 0 |"]
    # the keeps at step 2 saw the record after epoch 2 (index 1): slot 0 -> 10, slot 1 -> 11
    assert lines[-1] == "The kept seeds' contribution when kept: +10.5 pp on average (2 keeps)."
