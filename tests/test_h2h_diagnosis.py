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
