"""benchmarks.studies.paused_progress: a paused.tgz listed, and a step back refused."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from benchmarks.studies import paused_progress
from esper_agent.checkpoint import save_checkpoint

SLICE = "replay/Esper-CIFAR10-v0/esper_agent-e3-v0/seed{}.ckpt"


def _state(update: int, runs: list[tuple[int, int]] | None, device: str = "GPU X") -> dict:
    payload = {key: {} for key in ("config", "policy", "optimizer", "normalizers", "rng", "shape")}
    payload["counters"] = {"update": update, "total_updates": 50, "env_steps": 160 * update}
    if runs is not None:
        payload["runs"] = [{"device": device, "git_commit": "abcdef0123", "git_dirty": False, "from_host_epochs": a,
                            "to_host_epochs": b, "train_seconds": 12.3} for a, b in runs]
    return payload


def _tgz(tmp_path: Path, name: str, states: dict[int, dict], prefix: str = "") -> Path:
    root = tmp_path / name
    for seed, payload in states.items():
        save_checkpoint(root / SLICE.format(seed), payload)
    out = tmp_path / f"{name}.tgz"
    with tarfile.open(out, "w:gz") as tar:
        for seed in states:
            tar.add(root / SLICE.format(seed), arcname=prefix + SLICE.format(seed))
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
    new = _tgz(tmp_path, "new", {100: _state(5, [(0, 800)]), 101: _state(20, [(0, 1600), (1600, 3200)])})
    assert paused_progress.main([str(new), "--against", str(old)]) == 1
    captured = capsys.readouterr()
    assert f"{SLICE.format(100)}: 800 host epochs, 1600 before" in captured.err
    assert SLICE.format(101) not in captured.err
    assert f"| `{SLICE.format(101)}` | 20 of 50 | 3200 (was 1600) |" in captured.out


def test_a_slice_gone_from_the_new_state_is_listed_not_refused(tmp_path, capsys):
    old = _tgz(tmp_path, "old", {100: _state(10, [(0, 1600)]), 101: _state(10, [(0, 1600)])})
    new = _tgz(tmp_path, "new", {100: _state(12, [(0, 1600), (1600, 1920)])})
    assert paused_progress.main([str(new), "--against", str(old)]) == 0
    assert f"| `{SLICE.format(101)}` | gone: finished" in capsys.readouterr().out


def test_the_same_state_passes_however_the_tarball_names_it(tmp_path, capsys):
    states = {100: _state(10, [(0, 1600)])}
    old, new = _tgz(tmp_path, "old", states), _tgz(tmp_path, "new", states, prefix="./")
    assert paused_progress.main([str(new), "--against", str(old)]) == 0
    assert "1600 (was 1600)" in capsys.readouterr().out


def test_refuses_a_slice_trained_again_from_the_start(tmp_path, capsys):
    # a machine that lost the state: more host epochs than before, but not after the old runs
    old = _tgz(tmp_path, "old", {100: _state(10, [(0, 1600)])})
    new = _tgz(tmp_path, "new", {100: _state(20, [(0, 3200)], device="GPU Y")})
    assert paused_progress.main([str(new), "--against", str(old)]) == 1
    assert "its runs do not begin with the 1 it had" in capsys.readouterr().err


def test_finished_policies_are_not_paused_state(tmp_path, capsys):
    root = tmp_path / "trained"
    save_checkpoint(root / "seed100-trained.ckpt", _state(50, [(0, 8000)]))
    out = tmp_path / "trained.tgz"
    with tarfile.open(out, "w:gz") as tar:
        tar.add(root / "seed100-trained.ckpt", arcname="replay/seed100-trained.ckpt")
    assert paused_progress.main([str(out)]) == 0
    assert f"no paused slices in {out}" in capsys.readouterr().out


@pytest.mark.parametrize("make, expected", [
    (lambda d: d / "nope.tgz", "nope.tgz: no such file; expected a paused.tgz"),
    (lambda d: (d / "notes.txt").write_text("x") and d / "notes.txt", "notes.txt: not a readable tarball"),
])
def test_bad_input_is_named_and_exits_2(tmp_path, capsys, make, expected):
    with pytest.raises(SystemExit) as excinfo:
        paused_progress.main([str(make(tmp_path))])
    assert excinfo.value.code == 2
    assert expected in capsys.readouterr().err


def test_a_corrupt_checkpoint_is_named_by_tarball_and_member(tmp_path, capsys):
    bad = tmp_path / "seed100.ckpt"
    bad.write_bytes(b"not a checkpoint")
    out = tmp_path / "paused.tgz"
    with tarfile.open(out, "w:gz") as tar:
        tar.add(bad, arcname=SLICE.format(100))
    with pytest.raises(SystemExit) as excinfo:
        paused_progress.main([str(out)])
    assert excinfo.value.code == 2
    assert f"{out}:{SLICE.format(100)}: not an esper_agent checkpoint" in capsys.readouterr().err
