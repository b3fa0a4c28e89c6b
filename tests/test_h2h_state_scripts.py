"""The head-to-head's paused state outlives a checkout: ``collect.sh`` moves a call's finished slices into the results
folder and packs the paused learners' files into the committed ``paused-state.tgz``; ``stage.sh``, on a fresh clone,
lays the same state out again for the next calls. Run on copies of the committed scripts in a scratch repository."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
H2H = Path("benchmarks/results/h2h_v2")
ENV = "Esper-CIFAR10-v0"

pytestmark = pytest.mark.skipif(not all(shutil.which(tool) for tool in ("bash", "git", "tar", "gzip")),
                                reason="needs bash, git, tar and gzip")


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def commit(repo: Path) -> None:
    run(["git", "add", "-A"], repo)
    done = run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "state"], repo)
    assert done.returncode == 0, done.stderr


def scratch_repo(path: Path) -> Path:
    """A repository holding the committed scripts and plans, the screen summary and one finished slice."""
    for name in ("stage.sh", "collect.sh", "unpack_state.sh", "device_call.sh", "plan-learners.json",
                 "plan-fixed.json"):
        write(path / H2H / name, (ROOT / H2H / name).read_text())
    write(path / "benchmarks/results/screen" / ENV / "summary.json", "[]")
    write(path / H2H / ENV / "static/seed0.json", '{"arm": "static"}')
    write(path / H2H / ENV / "static/seed0-records.json.gz", "records")
    write(path / "README.md", "the tree beside the results, which every call carries")
    write(path / ".gitignore", "/.stage/\n")
    run(["git", "init", "-q"], path)
    commit(path)
    return path


def fake_data(path: Path) -> Path:
    for name in ("train_0.npz", "train_1.npz", "train_2.npz", "train_3.npz", "train_4.npz", "test.npz", "README.md",
                 "SHA256SUMS"):
        write(path / name, name)
    return path


def returned_call(folder: Path, files: dict[str, str]) -> Path:
    """A device call's returned state as ``device_call.sh`` packs it: ``.stage/h2h`` in two gzipped tar streams,
    the checkpoints apart, each cut into parts (one here)."""
    folder.mkdir(parents=True)
    for part, keep in (("h2h-small", lambda n: not n.endswith((".ckpt", ".zip", ".pkl"))),
                       ("h2h-ckpt", lambda n: n.endswith((".ckpt", ".zip", ".pkl", ".curve.json")))):
        with tarfile.open(folder / f"{part}.tgz.part-aa", "w:gz") as tar:
            for name, text in files.items():
                if keep(name):
                    info = tarfile.TarInfo(f"h2h/{name}")
                    info.size = len(text.encode())
                    tar.addfile(info, io.BytesIO(text.encode()))
    return folder


def test_collect_then_stage_on_a_fresh_clone_restores_the_paused_learners_and_skips_finished_slices(tmp_path):
    repo = scratch_repo(tmp_path / "repo")
    call = returned_call(tmp_path / "call", {
        f"{ENV}/esper_agent-e3/seed0.ckpt": "esper checkpoint",
        f"{ENV}/maskable_flat-m2/seed0.sb3.zip": "sb3 model",
        f"{ENV}/maskable_flat-m2/seed0.curve.json": '{"curve": []}',
        f"{ENV}/maskable_flat-m2/seed0.vecnorm.pkl": "statistics",
        f"{ENV}/static/seed0.json": '{"arm": "static"}',  # finished and collected before: no records left
        f"{ENV}/static/seed1.json": '{"arm": "static", "seed": 1}',  # finished in this call
        f"{ENV}/static/seed1-records.json.gz": "new records",
        f"logs/{ENV}/static-1.log": "static seed 1: done",
        f"logs/{ENV}/esper_agent-e3-0.log": "esper_agent seed 0: paused",
    })
    collected = run(["bash", str(H2H / "collect.sh"), str(call)], repo)
    assert collected.returncode == 0, collected.stderr
    assert "new: static seed1" in collected.stdout and "seed0" not in collected.stdout
    assert (repo / H2H / ENV / "static/seed1-records.json.gz").read_text() == "new records"
    assert (repo / H2H / "logs" / ENV / "static-1.log").exists()
    with tarfile.open(repo / H2H / "paused-state.tgz") as tar:
        packed = set(tar.getnames())
    assert packed == {f"h2h/{ENV}/esper_agent-e3/seed0.ckpt", f"h2h/{ENV}/maskable_flat-m2/seed0.sb3.zip",
                      f"h2h/{ENV}/maskable_flat-m2/seed0.curve.json", f"h2h/{ENV}/maskable_flat-m2/seed0.vecnorm.pkl",
                      f"h2h/logs/{ENV}/static-1.log", f"h2h/logs/{ENV}/esper_agent-e3-0.log"}
    commit(repo)

    clone = tmp_path / "clone"
    assert run(["git", "clone", "-q", str(repo), str(clone)], tmp_path).returncode == 0
    staged = run(["bash", str(H2H / "stage.sh"), str(fake_data(tmp_path / "cifar"))], clone)
    assert staged.returncode == 0, staged.stderr
    assert "2 finished slices, 2 paused learners' checkpoints" in staged.stdout
    state = clone / ".stage/h2h" / ENV
    assert (state / "esper_agent-e3/seed0.ckpt").read_text() == "esper checkpoint"
    assert (state / "maskable_flat-m2/seed0.vecnorm.pkl").read_text() == "statistics"
    assert sorted(p.name for p in (state / "static").iterdir()) == ["seed0.json", "seed1.json"]  # no records
    head = run(["git", "rev-parse", "HEAD"], clone).stdout
    assert (clone / ".stage/sha").read_text() == head
    assert sorted(p.name for p in (clone / ".stage/d3").iterdir()) == ["README.md", "SHA256SUMS", "test.npz",
                                                                       "train_4.npz"]
    assert (clone / ".stage/unpack_state.sh").exists()


def test_stage_refuses_a_tree_with_uncommitted_changes(tmp_path):
    repo = scratch_repo(tmp_path / "repo")
    (repo / H2H / "plan-fixed.json").write_text("[]")
    staged = run(["bash", str(H2H / "stage.sh"), str(fake_data(tmp_path / "cifar"))], repo)
    assert staged.returncode != 0 and "commit first" in staged.stdout
    assert not (repo / ".stage").exists()


def test_collect_refuses_a_returned_state_older_than_the_current_one(tmp_path):
    repo = scratch_repo(tmp_path / "repo")
    log = f"logs/{ENV}/esper_agent-e3-0.log"
    earlier = returned_call(tmp_path / "earlier", {f"{ENV}/esper_agent-e3/seed0.ckpt": "update 5", log: "a\n"})
    later = returned_call(tmp_path / "later", {f"{ENV}/esper_agent-e3/seed0.ckpt": "update 10", log: "a\nb\n"})
    bare = returned_call(tmp_path / "bare", {log: "no data\n"})  # a machine that had lost the state
    assert run(["bash", str(H2H / "collect.sh"), str(later)], repo).returncode == 0
    packed = (repo / H2H / "paused-state.tgz").read_bytes()
    for stale in (earlier, bare):
        refused = run(["bash", str(H2H / "collect.sh"), str(stale)], repo)
        assert refused.returncode != 0 and "refused" in refused.stdout
        assert (repo / H2H / "paused-state.tgz").read_bytes() == packed
        assert (repo / ".stage/h2h" / ENV / "esper_agent-e3/seed0.ckpt").read_text() == "update 10"
    forced = subprocess.run(["bash", str(H2H / "collect.sh"), str(earlier)], cwd=repo, capture_output=True,
                            text=True, env={"PATH": os.environ["PATH"], "FORCE": "1"})
    assert forced.returncode == 0, forced.stderr
    assert (repo / ".stage/h2h" / ENV / "esper_agent-e3/seed0.ckpt").read_text() == "update 5"


def test_collect_drops_a_finished_slices_leftover_training_state(tmp_path):
    """A learning slice killed between writing seed<N>.json and deleting its checkpoint is done for the campaign,
    so nothing would ever delete the checkpoint; it must not be carried on as a paused learner."""
    repo = scratch_repo(tmp_path / "repo")
    call = returned_call(tmp_path / "call", {
        f"{ENV}/esper_agent-e3/seed0.json": '{"arm": "esper_agent"}',
        f"{ENV}/esper_agent-e3/seed0-records.json.gz": "records",
        f"{ENV}/esper_agent-e3/seed0.ckpt": "left over",
        f"{ENV}/maskable_flat-m2/seed0.sb3.zip": "paused",
        f"logs/{ENV}/esper_agent-e3-0.log": "done",
    })
    collected = run(["bash", str(H2H / "collect.sh"), str(call)], repo)
    assert collected.returncode == 0, collected.stderr
    assert "paused state: 1 checkpoints" in collected.stdout
    assert not (repo / ".stage/h2h" / ENV / "esper_agent-e3/seed0.ckpt").exists()
    with tarfile.open(repo / H2H / "paused-state.tgz") as tar:
        assert f"h2h/{ENV}/esper_agent-e3/seed0.ckpt" not in tar.getnames()


def test_a_machine_lost_between_calls_is_restaged_from_the_last_calls_state(tmp_path):
    """The staged copy of unpack_state.sh lays out what the last call returned as .stage/h2h, for the next run call
    to carry, while benchmarks/results is moved aside; an earlier call's return is refused."""
    repo = scratch_repo(tmp_path / "repo")
    assert run(["bash", str(H2H / "stage.sh"), str(fake_data(tmp_path / "cifar"))], repo).returncode == 0
    log = f"logs/{ENV}/esper_agent-e3-0.log"
    first = returned_call(tmp_path / "first", {f"{ENV}/esper_agent-e3/seed0.ckpt": "update 8", log: "a\n"})
    second = returned_call(tmp_path / "second", {f"{ENV}/esper_agent-e3/seed0.ckpt": "update 16", log: "a\nb\n"})
    shutil.move(repo / "benchmarks/results", tmp_path / "results-aside")
    for call in (first, second):
        unpacked = run(["bash", ".stage/unpack_state.sh", str(call)], repo)
        assert unpacked.returncode == 0, unpacked.stdout + unpacked.stderr
    assert (repo / ".stage/h2h" / ENV / "esper_agent-e3/seed0.ckpt").read_text() == "update 16"
    refused = run(["bash", ".stage/unpack_state.sh", str(first)], repo)
    assert refused.returncode != 0 and "refused" in refused.stdout
    assert (repo / ".stage/h2h" / ENV / "esper_agent-e3/seed0.ckpt").read_text() == "update 16"
    assert not (repo / ".stage/h2h-new").exists()


def device_call(tmp_path: Path, out: Path) -> subprocess.CompletedProcess:
    """``device_call.sh`` run for the fixed arms alone on a machine whose campaign and GPU monitor are stubs."""
    stubs = tmp_path / "bin"
    for tool, body in (("python", "exit 0"), ("nvidia-smi", "exit 0")):
        write(stubs / tool, f"#!/usr/bin/env bash\n{body}\n")
        (stubs / tool).chmod(0o755)
    machine = tmp_path / "machine"
    write(machine / ".stage/cifar/test.npz", "data")
    write(machine / ".stage/sha", "abc")
    write(machine / f".stage/h2h/logs/{ENV}/static-0.log",
          "== started\nstatic seed 0: test accuracy 0.8123, seed params 0, 140s\n")
    write(machine / f".stage/h2h/logs/{ENV}/esper_agent-e3-1.log", "esper_agent seed 1: paused after update 9/50\n")
    out.mkdir(exist_ok=True)
    return subprocess.run(["bash", str(ROOT / H2H / "device_call.sh"), "5", "0", "1", "0"], cwd=machine,
                          capture_output=True, text=True,
                          env={"PATH": f"{stubs}:{os.environ['PATH']}", "OUT": str(out)})


def test_device_call_prints_progress_but_masks_finished_slices_results(tmp_path):
    """What a call prints reaches whoever runs the campaign call by call; results wait for the declared read."""
    called = device_call(tmp_path, tmp_path / "out")
    assert called.returncode == 0, called.stdout + called.stderr
    assert "WARNING" not in called.stdout
    assert "0.8123" not in called.stdout and "140s" not in called.stdout
    assert "static seed 0: done (results masked until the read)" in called.stdout
    assert "esper_agent seed 1: paused after update 9/50" in called.stdout


def test_device_call_warns_when_more_comes_back_than_the_tool_returns(tmp_path):
    """Only eight files come back from a call: a state packed into more would be lost with the machine."""
    out = tmp_path / "out"
    for k in range(5):  # with the call's own four files (two logs, two state parts), nine
        write(out / f"extra-{k}", "x")
    called = device_call(tmp_path, out)
    assert "WARNING: 9 files" in called.stdout, called.stdout
