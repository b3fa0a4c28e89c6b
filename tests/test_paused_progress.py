"""benchmarks.studies.paused_progress: a paused.tgz listed, and a step back refused."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from benchmarks.studies import paused_progress
from esper_agent.checkpoint import save_checkpoint

SLICE = "replay/Esper-CIFAR10-v0/esper_agent-e3-v0/seed{}.ckpt"


def _state(update: int, runs: list[tuple[int, int]] | None) -> dict:
    payload = {key: {} for key in ("config", "policy", "optimizer", "normalizers", "rng", "shape")}
    payload["counters"] = {"update": update, "total_updates": 50, "env_steps": 160 * update}
    if runs is not None:
        payload["runs"] = [{"device": "GPU X", "git_commit": "abcdef0123", "from_host_epochs": a,
                            "to_host_epochs": b, "train_seconds": 12.3} for a, b in runs]
    return payload


def _tgz(tmp_path: Path, name: str, states: dict[int, dict]) -> Path:
    root = tmp_path / name
    for seed, payload in states.items():
        save_checkpoint(root / SLICE.format(seed), payload)
    out = tmp_path / f"{name}.tgz"
    with tarfile.open(out, "w:gz") as tar:
        for seed in states:
            tar.add(root / SLICE.format(seed), arcname=SLICE.format(seed))
    return out


def test_lists_each_slice_with_its_runs(tmp_path, capsys):
    new = _tgz(tmp_path, "new", {100: _state(10, [(0, 800), (800, 1600)]), 101: _state(4, None)})
    assert paused_progress.main([str(new)]) == 0
    out = capsys.readouterr().out
    assert f"| `{SLICE.format(100)}` | 10 of 50 | 1600 |" in out
    assert "GPU X at abcdef0: host epochs 0–800 in 12 s; GPU X at abcdef0: host epochs 800–1600" in out
    # a state saved before runs were recorded counts its sub-env steps
    assert f"| `{SLICE.format(101)}` | 4 of 50 | 640 | not recorded |" in out


def test_refuses_a_slice_that_went_back(tmp_path, capsys):
    old = _tgz(tmp_path, "old", {100: _state(10, [(0, 1600)]), 101: _state(10, [(0, 1600)])})
    new = _tgz(tmp_path, "new", {100: _state(5, [(0, 800)]), 101: _state(20, [(0, 3200)])})
    assert paused_progress.main([str(new), "--against", str(old)]) == 1
    captured = capsys.readouterr()
    assert f"{SLICE.format(100)}: 800 host epochs, 1600 before" in captured.err
    assert SLICE.format(101) not in captured.err
    assert "3200 (was 1600)" in captured.out


def test_a_slice_gone_from_the_new_state_is_listed_not_refused(tmp_path, capsys):
    old = _tgz(tmp_path, "old", {100: _state(10, [(0, 1600)]), 101: _state(10, [(0, 1600)])})
    new = _tgz(tmp_path, "new", {100: _state(12, [(0, 1920)])})
    assert paused_progress.main([str(new), "--against", str(old)]) == 0
    assert f"| `{SLICE.format(101)}` | gone: finished" in capsys.readouterr().out


def test_a_missing_file_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        paused_progress.main([str(tmp_path / "nope.tgz")])
    assert "nope.tgz: no such file; expected a paused.tgz" in capsys.readouterr().err
