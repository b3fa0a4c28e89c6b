"""Checkpoint files: round trip, atomic writes, and clear errors that name the file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import toy_env
from agent_fixtures import one_torch_thread  # noqa: F401  (autouse: one torch thread per test)

from esper_agent.checkpoint import SCHEMA_VERSION, CheckpointError, load_checkpoint, save_checkpoint


@pytest.fixture(scope="module")
def payload() -> dict:
    trainer = toy_env.make_toy_trainer()
    trainer.update()
    return trainer.state_dict()


def test_round_trip_restores_everything(tmp_path: Path, payload: dict) -> None:
    path = save_checkpoint(tmp_path / "ckpt.pt", payload)
    loaded = load_checkpoint(path)
    assert loaded["counters"] == payload["counters"] and loaded["config"] == payload["config"]
    for key, value in payload["policy"].items():
        assert torch.equal(loaded["policy"][key], value)
    assert torch.equal(loaded["rng"]["minibatch"], payload["rng"]["minibatch"])
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]  # no temporary file left behind
    trainer = toy_env.make_toy_trainer()
    trainer.load_state_dict(loaded)
    assert trainer.update_index == 1


def test_rewrite_is_atomic_when_the_write_fails(tmp_path: Path, payload: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    path = save_checkpoint(tmp_path / "ckpt.pt", payload)
    original = path.read_bytes()

    def crash(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("esper_agent.checkpoint.os.fsync", crash)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, payload | {"counters": {**payload["counters"], "update": 99}})
    assert path.read_bytes() == original
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


def test_truncated_file_names_the_file(tmp_path: Path, payload: dict) -> None:
    path = save_checkpoint(tmp_path / "ckpt.pt", payload)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=rf"{path}: checksum mismatch.*truncated or corrupted"):
        load_checkpoint(path)


def test_corrupted_byte_names_the_file(tmp_path: Path, payload: dict) -> None:
    path = save_checkpoint(tmp_path / "ckpt.pt", payload)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=rf"{path}: checksum mismatch"):
        load_checkpoint(path)


def test_schema_mismatch_names_the_file_and_versions(tmp_path: Path, payload: dict) -> None:
    path = save_checkpoint(tmp_path / "ckpt.pt", payload)
    data = path.read_bytes()
    path.write_bytes(data.replace(b" %d " % SCHEMA_VERSION, b" %d " % (SCHEMA_VERSION + 1), 1))
    with pytest.raises(CheckpointError, match=rf"{path}: checkpoint schema version {SCHEMA_VERSION + 1}"):
        load_checkpoint(path)


def test_other_files_are_refused_with_the_file_named(tmp_path: Path) -> None:
    plain = tmp_path / "plain.pt"
    torch.save({"policy": {}}, plain)  # a torch file, but not ours
    with pytest.raises(CheckpointError, match=rf"{plain}: not an esper_agent checkpoint"):
        load_checkpoint(plain)
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    with pytest.raises(CheckpointError, match=str(empty)):
        load_checkpoint(empty)
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        load_checkpoint(tmp_path / "missing.pt")


def test_payload_checks(tmp_path: Path, payload: dict) -> None:
    with pytest.raises(ValueError, match="lacks"):
        save_checkpoint(tmp_path / "x.pt", {"policy": {}})
    trainer = toy_env.make_toy_trainer(hidden_size=32)
    with pytest.raises(ValueError, match="AgentConfig"):
        trainer.load_state_dict(payload)
