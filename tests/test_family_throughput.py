"""benchmarks/family_throughput.py: the family's training-throughput baselines (CUDA graphs need a GPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from benchmarks import family_throughput


def test_refuses_without_cuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        family_throughput.main(["--out", str(tmp_path / "t.json")])


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
