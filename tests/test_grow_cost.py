"""Smoke test of benchmarks/grow_cost.py: a tiny grown run on synthetic data, and the report rebuilt from it."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from benchmarks import grow_cost, grow_report


def test_grow_cost_trains_grows_boosts_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "slice.jsonl"
    arms = ["grow50-final-wsd-boost2", "static-final-wsd"]
    grow_cost.main(["--dataset", "synthetic", "--data-dir", "unused", "--epochs", "2", "--seeds", "0",
                    "--set", "catchup", "--arms", *arms, "--out", str(out)])
    grow_cost.main(["--dataset", "synthetic", "--data-dir", "unused", "--epochs", "2", "--seeds", "0",
                    "--arms", "static-final-wsd", "--out", str(out)])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    grown = next(r for r in rows if r["name"] == arms[0])
    assert grown["params"] == grow_cost.param_count(grow_cost.FINAL)
    assert grown["grow_epoch"] == 1
    assert [len(grown[k]) for k in ("val_curve", "val_curve_tta", "val_curve_ema")] == [2, 2, 2]
    assert 0.0 <= grown["test_accuracy_ema"] <= 1.0
    static = next(r for r in rows if r["name"] == "static-final-wsd")
    assert grown["train_flops"] < static["train_flops"]  # the seedling's first epoch is cheaper
    grow_cost.report(tmp_path)
    summary = {r["arm"]: r for r in json.loads((tmp_path / "summary.json").read_text())}
    expected = 100 * (grown["test_accuracy"] - static["test_accuracy"])
    assert abs(summary[arms[0]]["minus_static_twin"] - expected) < 1e-9
    assert "grow50-final-wsd-boost2" in (tmp_path / "table.md").read_text()


def test_learning_rate_schedules() -> None:
    lr = grow_cost.learning_rate
    assert lr(0, 100, 10, "wsd", 0.3) == grow_cost.PEAK_LR / 10
    assert lr(50, 100, 10, "wsd", 0.3) == grow_cost.PEAK_LR  # stable until 70% of the run
    assert lr(85, 100, 10, "wsd", 0.3) == grow_cost.PEAK_LR * 15 / 30
    assert lr(55, 100, 10, "linear", 0.3) == grow_cost.PEAK_LR * 45 / 90


def test_run_data_applies_the_condition() -> None:
    labels = torch.arange(2000) % 10
    spec = SimpleNamespace(num_classes=10)
    data = SimpleNamespace(train_y=labels, val_y=labels[:500], test_y=labels[:300], spec=spec)

    def run(condition: str) -> grow_cost.RunData:
        arm = grow_cost.Arm("a", grow_cost.SEEDLING, grow_cost.SEEDLING, None, "wsd", condition=condition)
        return grow_cost.run_data(arm, data, torch.Generator().manual_seed(0))

    with pytest.raises(ValueError, match="needs a pool of 15000"):
        run("pool15k-noise20")
    noisy = run("noise40")
    assert torch.equal(noisy.pool, torch.arange(2000)) and int((noisy.labels != labels).sum()) == 800
    two = run("classes2")
    kept = set(labels[two.pool].tolist())
    assert len(kept) == 2 and len(two.pool) == 400 and torch.equal(two.labels, labels)
    assert set(labels[two.val].tolist()) == kept == set(labels[two.test].tolist()) and len(two.val) == 100
    assert "static-largest-wsd-pool5k" in {a.name for a in grow_cost.condition_arms(20)}
    assert "grow25-final-wsd-boost2-res8" in {a.name for a in grow_cost.axes_arms(20)}
    assert grow_cost.Arm("g", grow_cost.SEEDLING, grow_cost.FINAL, 5, "wsd", condition="pool5k").static_twin == (
        "static-final-wsd-pool5k")


def test_run_inputs_reduce_resolution() -> None:
    data = SimpleNamespace(mean=torch.zeros(3), std=torch.ones(3) / 255)  # normalize then leaves pixel values
    full = grow_cost.RunData(data, grow_cost.PROBE_CONDITIONS["full"], *[torch.zeros(0)] * 4)
    low = grow_cost.RunData(data, grow_cost.PROBE_CONDITIONS["res16"], *[torch.zeros(0)] * 4)
    images = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    torch.testing.assert_close(full.inputs(images), images.float())
    assert low.inputs(images).shape == (2, 3, 32, 32)
    torch.testing.assert_close(low.inputs(images)[:, :, ::2, ::2], F.avg_pool2d(images.float(), 2))


def test_committed_table_is_what_the_report_computes_from_its_slices(tmp_path: Path) -> None:
    committed = Path(__file__).parent.parent / "benchmarks" / "results" / "grow_cost"
    for slice_file in committed.glob("*.jsonl"):
        (tmp_path / slice_file.name).write_text(slice_file.read_text())
    grow_cost.report(tmp_path)
    assert (tmp_path / "table.md").read_text() == (committed / "table.md").read_text()
    for name in ("summary.json", "oracle.md"):
        assert (tmp_path / name).read_text() == (committed / name).read_text()


def test_oracle_gap_is_paired_by_seed() -> None:
    # plan "big" wins condition "a" by 4 points, plan "small" wins "b" by 2; FLOPs: big 1.0, small 0.5 (units)
    accuracy = {("big", "a"): 0.90, ("small", "a"): 0.86, ("big", "b"): 0.70, ("small", "b"): 0.72}
    rows, arms = [], {}
    for (plan, condition), acc in accuracy.items():
        name = f"{plan}-{condition}"
        arms[name] = SimpleNamespace(plan=plan, condition=condition, grow_epoch=None, static_twin=name)
        for seed, shift in ((0, 0.0), (1, 0.01)):
            rows.append({"name": name, "seed": seed, "test_accuracy": acc + shift,
                         "train_flops": 1.0 if plan == "big" else 0.5, "params": 1, "device": "cpu"})
    rows.append({"name": "static-largest-wsd", "seed": 0, "test_accuracy": 0.5, "train_flops": 1.0, "params": 1,
                 "device": "cpu"})
    arms["static-largest-wsd"] = SimpleNamespace(plan="largest", condition="full", grow_epoch=None, static_twin="")
    free = grow_report.oracle_gap(rows, arms, ["a", "b"], grow_report.Price("linear", 0.0))
    assert free["best_single"] == "big" and free["oracle"] == {"a": "big", "b": "small"}
    assert abs(free["gap"] - 1.0) < 1e-9 and free["gap_ci95"] < 1e-9  # (0 + 2) / 2 on both seeds
    priced = grow_report.oracle_gap(rows, arms, ["a", "b"], grow_report.Price("linear", 10.0))  # big 10, small 5
    assert priced["best_single"] == "small" and priced["oracle"] == {"a": "small", "b": "small"}
    assert priced["gap"] == 0.0
    assert grow_report.oracle_gap(rows, arms, ["a", "b"], grow_report.Price("doubling", 1.0)) is None  # no seedling
    rows.append({"name": "static-seedling-wsd", "seed": 0, "test_accuracy": 0.5, "train_flops": 0.5, "params": 1,
                 "device": "cpu"})
    arms["static-seedling-wsd"] = SimpleNamespace(plan="seedling", condition="full", grow_epoch=None, static_twin="")
    for row in rows:
        row["params"] = 4 if row["name"].startswith("big") else 1
    # per doubling: big's FLOPs are twice the seedling's (1 point) and its parameters four times (2 x 1 point)
    doubling = grow_report.oracle_gap(rows, arms, ["a", "b"], grow_report.Price("doubling", 1.0, 1.0))
    assert doubling["best_single"] == "small" and doubling["oracle"] == {"a": "big", "b": "small"}
    assert abs(doubling["gap"] - 0.5) < 1e-9  # condition a: 90 - 3 = 87 against 86; b: no gap


def test_validation_noise_is_zero_on_a_trend_and_sees_jitter() -> None:
    trend = [0.5 + 0.01 * t for t in range(20)]
    assert grow_report.validation_noise([trend]) < 1e-9
    jitter = [a + (0.005 if t % 3 == 0 else 0.0) for t, a in enumerate(trend)]
    assert 0.1 < grow_report.validation_noise([trend, jitter, jitter]) < 1.0  # the median of 0, j, j is j
