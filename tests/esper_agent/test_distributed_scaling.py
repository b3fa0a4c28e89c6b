"""``benchmarks/scaling.py`` in its CPU smoke mode: the launcher, torchrun with 1 and 2 gloo processes and the
one-process ``devices=[...]`` row, through the same code as the GPU measurement."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import scaling


def test_scaling_smoke_measures_one_and_two_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a relative --out names the same folder to the launcher and its workers
    scaling.main(["--smoke", "--out", "."])
    report = json.loads((tmp_path / "scaling-cpu.json").read_text())
    rows = report["rows"]
    assert [(r["mode"], r["processes"], r["sub_envs"]) for r in rows] == [
        ("torchrun", 1, 2), ("torchrun", 2, 4), ("devices", 1, 4)]
    # One timed update of 3 steps per sub-env: every process's transitions are counted.
    assert [r["env_steps"] for r in rows] == [6, 12, 12]
    assert rows[1]["env_devices"] == [["cpu"], ["cpu"]] and rows[2]["env_devices"] == [["cpu", "cpu"]]
    for row in rows:
        assert row["env_steps_per_s"] > 0 and row["images_per_s"] > 0 and row["update_s"] > 0
    assert rows[0]["efficiency_env_steps_per_s"] == 1.0
    assert rows[1]["efficiency_images_per_s"] == rows[1]["images_per_s"] / (2 * rows[0]["images_per_s"])
    table = (tmp_path / "scaling-cpu.md").read_text()
    assert "| torchrun | 2 | 0 | 4 |" in table and "devices=[cpu, cpu]" in table and "NCCL_NVLS_ENABLE=0" in table
    assert not list(tmp_path.glob(".scaling-*"))  # the per-launch results were collected and removed
