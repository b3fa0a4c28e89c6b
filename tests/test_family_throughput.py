"""benchmarks/family_throughput.py: the family's training-throughput baselines (CUDA graphs need a GPU; the
trajectory replay's eager path runs on the CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from benchmarks import family_throughput
from esper_env.architecture import Architecture


def test_refuses_without_cuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        family_throughput.main(["--out", str(tmp_path / "t.json")])


def test_a_trajectory_grows_models_in_place_and_starts_afresh_where_they_shrink(
        monkeypatch: pytest.MonkeyPatch) -> None:
    trained: list[tuple[int, Architecture]] = []
    step = family_throughput.Model.step

    def spy(model: family_throughput.Model) -> None:
        trained.append((id(model), model.arch))
        step(model)

    monkeypatch.setattr(family_throughput.Model, "step", spy)
    small, wide = Architecture((8, 8, 8)), Architecture((8, 16, 8), (0, 1, 0))
    data = family_throughput.random_data(64, 8, "cpu")
    row = family_throughput.train_trajectory([[small], [wide], [small]], graphs=False, batches=2, data=data, batch=4)
    assert [arch for _, arch in trained] == [small] * 3 + [wide] * 2 + [small] * 2  # one warm-up step, then 2 a step
    models = [model for model, _ in trained]
    assert models[0] == models[4] != models[5]  # widened and deepened in place; narrowed: a new model
    assert row["mode"] == "plain" and row["steps"] == 6 and row["captures"] == 0 and row["images_per_s"] > 0


@pytest.mark.gpu
def test_every_mode_runs_and_growth_recaptures(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    family_throughput.main(["--models", "2", "--steps", "8", "--out", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert {r["mode"] for r in rows} == {"plain", "graphs", "graphs+growth"}
    assert all(r["images_per_s"] > 0 for r in rows)
    grown = next(r for r in rows if r["mode"] == "graphs+growth")
    static = next(r for r in rows if r["mode"] == "graphs" and r["arch"] == grown["arch"])
    assert grown["capture_s"] > static["capture_s"]  # one more capture per model
